"""Per-layer encodings: a forward pre-hook on each attention layer of a layer selection that gives it the
rotation of its patch instead of the model's own (``position_embeddings``, the ``(cos, sin)`` every decoder
layer receives from the model's shared rotary module).

What the hook hands the layer, from the patch's plan (``plan.hook``):

- ``rotary`` (``rope``, trajectory on ``rope``, ``native``): ``cos``/``sin`` at the patch's positions with the
  rotary module's own frequencies for that layer (its layer type's, where it keeps several), so the layer's
  own code rotates exactly as the model does, at those positions;
- anything else (``none``; ``alibi``, ``cope`` and ``rope`` with ``rotary_fraction``, whose terms our
  attention functions add to the layer): the identity rotation (``cos = 1``, ``sin = 0``), which switches
  the layer's own rotation off (``q * 1 + rotate_half(q) * 0`` is ``q``).

Layers outside every selection are not hooked: they get the model's own ``(cos, sin)``, computed by its own
rotary module. Shape legend: ``b`` batch, ``n`` new tokens, ``r`` rotary width.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import nn

from .families.structure import rotary_frequencies
from .layer_frequencies import ROTARY_FREQUENCIES
from .state import PatchState

__all__ = ["layer_type_of", "make_layer_hook"]

ARGUMENT = "position_embeddings"


def layer_type_of(rotary: nn.Module, model_config, index: int) -> str | None:
    """The layer type whose frequencies layer ``index`` uses, for a rotary module that keeps one set per layer
    type (``<type>_inv_freq``, Gemma 3); ``None`` for a module with one set."""
    if hasattr(rotary, "inv_freq"):
        return None
    types = getattr(model_config, "layer_types", None)
    return types[index] if types is not None else None


def layer_cos_sin(state: PatchState, given: tuple[torch.Tensor, torch.Tensor], rotary: nn.Module,
                  layer_type: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(cos, sin)`` ``[b, n, r]`` a selected layer gets (module docstring), built once per forward and
    layer type for all the patch's layers."""
    cos, sin = given
    step = state.step
    key = ("layer_rotary", layer_type, cos.dtype, cos.device, cos.shape[-1])
    hit = step.memo.get(key)
    if hit is None:
        if state.plan.hook == "rotary":
            inv_freq, scaling = rotary_frequencies(rotary, layer_type)
            with step.sharing():
                hit = state.scheme.rotary_cos_sin(step.positions.to(cos.device), inv_freq, scaling, cos.dtype)
        else:
            hit = (torch.ones_like(cos), torch.zeros_like(sin))
            step.memo[ROTARY_FREQUENCIES, layer_type] = rotary_frequencies(rotary, layer_type)  # (a remap reads them)
        step.memo[key] = hit
    return hit


def make_layer_hook(state: PatchState, attention: nn.Module, rotary: nn.Module,
                    layer_type: str | None) -> Callable:
    """A forward pre-hook (``with_kwargs=True``) for one selected attention module."""
    names = [p for p in inspect.signature(type(attention).forward).parameters if p != "self"]
    at = names.index(ARGUMENT)

    def hook(module, args, kwargs):
        if ARGUMENT in kwargs:
            given = kwargs[ARGUMENT]
        elif len(args) > at:
            given = args[at]
        else:
            given = None
        if given is None:
            raise RuntimeError(
                f"{type(module).__name__} was called without position_embeddings, through which hf_trajpe gives "
                "this layer its own encoding; this model's layers do not pass them as transformers' decoder "
                "layers do: patch it without layers")
        new = layer_cos_sin(state, given, rotary, layer_type)
        if ARGUMENT in kwargs:
            return args, {**kwargs, ARGUMENT: new}
        return (*args[:at], new, *args[at + 1:]), kwargs

    return hook
