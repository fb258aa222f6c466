"""Support by structure: a :class:`FamilyAdapter` built from what a model has, not from a hand list.

What is looked for, below ``model.base_model``:

- a rotary module: one module (not inside a layer) with ``inv_freq`` (or ``<layer type>_inv_freq``) and
  ``attention_scaling``, whose ``cos``/``sin`` hf_trajpe reproduces bit for bit (checked by calling it);
- a learned absolute table: an ``nn.Embedding`` named like a position table (``wpe``,
  ``position_embeddings``, ``embed_positions``), with its row offset (OPT's ``offset``, RoBERTa's
  ``padding_idx + 1``);
- self-attention modules that call transformers' attention-function interface (they can take biases
  and rotations), and whether they attend causally.

A model with none of a table or rotary module, or whose rotary frequencies change at run time, is
refused by the plan with a message that says why. Hand-written entries in ``families/`` override this
where a model deviates.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import nn

from ...encodings.rotary import rotary_cos_sin
from .adapter import FamilyAdapter

__all__ = ["POSITION_TABLE_NAMES", "adapter_from_structure", "rotary_frequencies"]

#: attribute names under which transformers models keep a learned absolute position table
POSITION_TABLE_NAMES = ("wpe", "position_embeddings", "embed_positions", "position_embedding")
#: attribute names of relative-position machinery inside attention, which a patch cannot replace
RELATIVE_NAMES = ("relative_attention_bias", "rel_embeddings", "relative_attention", "pos_proj", "pos_q_proj")


class StructureError(NotImplementedError):
    """The model's structure has nothing hf_trajpe can patch (or something it cannot reproduce)."""


def rotary_frequencies(rotary: nn.Module, layer_type: str | None = None) -> tuple[torch.Tensor, float]:
    """``inv_freq`` and ``attention_scaling`` of a rotary module (per layer type where it keeps several)."""
    prefix = f"{layer_type}_" if layer_type else ""
    return getattr(rotary, prefix + "inv_freq"), float(getattr(rotary, prefix + "attention_scaling", 1.0))


def _layer_types(rotary: nn.Module) -> tuple[str | None, ...]:
    types = tuple(sorted(n[: -len("_inv_freq")] for n, _ in rotary.named_buffers(recurse=False)
                         if n.endswith("_inv_freq") and not n.endswith("original_inv_freq")))
    return types or (None,)


def _rotary_paths(base: nn.Module) -> list[str]:
    paths = []
    for name, module in base.named_modules():
        has_freq = hasattr(module, "inv_freq") or any(n.endswith("_inv_freq") for n, _ in module.named_buffers(
            recurse=False))
        if name and has_freq and type(module).__name__.endswith("RotaryEmbedding"):
            paths.append(name)
    return paths


def _reproduces(rotary: nn.Module) -> str | None:
    """Why hf_trajpe's cos/sin differ from the module's own at integer positions, or None if they agree."""
    positions = torch.arange(7, dtype=torch.int64)[None]
    x = torch.zeros(1, 1, 1)
    for layer_type in _layer_types(rotary):
        try:
            inv_freq, scaling = rotary_frequencies(rotary, layer_type)
            args = (x, positions) if layer_type is None else (x, positions, layer_type)
            with torch.no_grad():
                stock = rotary(*args)
        except Exception as exc:  # a signature or frequency layout we do not know
            return f"its rotary module {type(rotary).__name__} cannot be called as (x, position_ids): {exc}"
        ours = rotary_cos_sin(positions.float(), inv_freq=inv_freq.to(x.device), attention_scaling=scaling,
                              dtype=x.dtype)
        if not (isinstance(stock, tuple) and len(stock) == 2 and all(
                a.shape == b.shape and torch.equal(a, b) for a, b in zip(stock, ours, strict=True))):
            return (f"its rotary module {type(rotary).__name__} does not compute the half-split cos/sin of "
                    "Llama's rotary embedding")
    return None


def _table(base: nn.Module) -> tuple[str, int] | None:
    for name, module in base.named_modules():
        if name.rsplit(".", 1)[-1] in POSITION_TABLE_NAMES and isinstance(module, nn.Embedding):
            offset = getattr(module, "offset", None)
            if offset is None:  # RoBERTa-like: positions start after the padding row
                offset = module.padding_idx + 1 if module.padding_idx is not None else 0
            return name, int(offset)
    return None


@functools.cache
def _uses_attention_interface(cls: type) -> bool:
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    return "ALL_ATTENTION_FUNCTIONS" in source


def _self_attention(base: nn.Module) -> tuple[list[nn.Module], tuple[str, ...]]:
    modules = [m for m in base.modules()
               if _uses_attention_interface(type(m)) and not getattr(m, "is_cross_attention", False)]
    return modules, tuple(sorted({type(m).__name__ for m in modules}))


def _runner_path(model: nn.Module, base: nn.Module) -> str:
    """The module that owns the token embeddings and whose forward takes the ids, the mask and the cache:
    the base model, or (OPT) a decoder inside it that the LM head calls directly."""
    embed = model.get_input_embeddings()
    for name, module in base.named_modules():
        if not name or embed not in module.children():
            continue
        params = inspect.signature(type(module).forward).parameters
        if {"input_ids", "attention_mask"} <= set(params) and ({"cache", "past_key_values"} & set(params)):
            return name
    return ""


def adapter_from_structure(model: nn.Module) -> FamilyAdapter:
    """The adapter for ``model`` from its structure; raises :class:`StructureError` saying what is missing."""
    model_type = model.config.model_type
    base = model.base_model
    rotary = _rotary_paths(base)
    table = _table(base)
    attention, names = _self_attention(base)
    if getattr(model.config, "is_encoder_decoder", False):
        raise StructureError(
            f"{model_type}: an encoder-decoder model (two position schemes and cross-attention); hf_trajpe "
            "patches decoder-only and encoder-only models"
        )
    relative = sorted({n.rsplit(".", 1)[-1] for n, _ in base.named_modules()} & set(RELATIVE_NAMES))
    if relative or getattr(model.config, "relative_attention", False):
        raise StructureError(
            f"{model_type}: its attention has relative positions of its own "
            f"({', '.join(relative) or 'relative_attention'}: relative biases such as T5's, disentangled attention "
            "such as DeBERTa's), which a patch cannot replace; use a model with a rotary module or a learned "
            "absolute table"
        )
    if len(rotary) > 1:
        raise StructureError(
            f"{model_type}: several rotary modules ({', '.join(rotary)}); hf_trajpe supports one rotary module "
            "shared by the layers"
        )
    if rotary:
        why = _reproduces(dict(base.named_modules())[rotary[0]])
        if why:
            raise StructureError(f"{model_type}: {why}; hf_trajpe cannot reproduce its positions exactly")
    if rotary and table is not None:
        raise StructureError(f"{model_type}: both a rotary module and a learned position table ({table[0]})")
    if not rotary and table is None:
        raise StructureError(
            f"{model_type}: no rotary module and no learned position table found (relative biases such as "
            "T5's, disentangled attention such as DeBERTa's, or a built-in ALiBi are not supported)"
        )
    causal = all(bool(getattr(m, "is_causal", True)) for m in attention) if attention else True
    token_types = any(n.endswith("token_type_embeddings") for n, _ in base.named_modules())
    offset = table[1] if table else 0
    return FamilyAdapter(
        name=type(base).__name__.removesuffix("Model") or model_type,
        model_types=(model_type,),
        native="rope" if rotary else "learned",
        self_attention=names,
        table_path=None if rotary else table[0],
        rotary_path=rotary[0] if rotary else None,
        token_type_ids=token_types,
        table_offset=lambda config, offset=offset: offset,
        causal=lambda config, causal=causal: causal,
        attention_module=type(attention[0]).__module__ if attention else None,
        runner_path=_runner_path(model, base),
    )
