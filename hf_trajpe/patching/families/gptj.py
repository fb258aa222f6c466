"""GPT-J: rotary positions kept in every attention layer's own ``embed_positions`` buffer (``[rows, r]``:
``r/2`` sines then ``r/2`` cosines of ``p * theta_k``), read by ``_get_embed_positions`` and gathered at
``position_ids``, then applied in the interleaved layout (``rotate_every_two``: dimension ``2k`` pairs
with ``2k+1``) to the first ``rotary_dim`` dimensions of each head.

The override shadows ``_get_embed_positions`` on each attention instance: it returns the sin/cos of
this forward's tokens (the state's positions: ranks, or fractional trajectory positions), and a
forward pre-hook on the base model makes ``position_ids`` ``arange(n)`` per row, so the model's own
gather reads them back in order and its own code rotates. Schemes that do not rotate get the identity
(``sin = 0, cos = 1``), which switches GPT-J's rotation off. At an integer position inside the table
the value is the buffer's own row (so ``native`` and trajectory at strength 0 are the stock model bit
for bit); elsewhere it is computed at the position, with GPT-J's frequencies.

From transformers 5.24 the buffer moved into one ``GPTJRotaryEmbedding`` module on the base model
(``rotary_emb``: ``forward(x, position_ids)`` gathers the rows and returns ``(sin, cos)``, each ``[b, n, r/2]``)
and the attention layers use transformers' attention interface. The override then shadows that module's
``forward`` instead, with the same values split in two; ``position_ids`` are left alone (the engine's
pre-hook has checked them).

Shape legend: ``b`` batch, ``n`` new tokens, ``r`` rotary width (``rotary_dim``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ...encodings.interpolation import interpolate_rows
from ..schemes.scheme import table_rows_for
from .override import OverrideAdapter, shadow_method

__all__ = ["GPTJ", "GPTJAdapter", "gptj_inv_freq", "gptj_sincos_table", "interleaved_sincos"]

#: GPT-J's attention classes (eager, flash); both read their sin/cos through ``_get_embed_positions``
ATTENTION_CLASSES = ("GPTJAttention", "GPTJFlashAttention2")


def gptj_inv_freq(dim: int, device: torch.device | None = None) -> torch.Tensor:
    """``theta_k``, ``[dim/2]`` float32, formed as GPT-J's ``create_sinusoidal_positions`` forms it."""
    return 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device) / dim))


def gptj_sincos_table(rows: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """GPT-J's table ``[rows, dim]`` (sines then cosines) at the integer positions ``0..rows-1``."""
    angle = torch.arange(rows, dtype=torch.int64, device=device).float()[:, None] * gptj_inv_freq(dim, device)
    return torch.cat((torch.sin(angle), torch.cos(angle)), dim=1)


def interleaved_sincos(positions: torch.Tensor, table: torch.Tensor, mode: str = "exact") -> torch.Tensor:
    """``sin|cos`` ``[b, n, r]`` in GPT-J's layout at ``positions`` ``[b, n]`` (float, possibly fractional).

    ``table``: the model's buffer ``[rows, r]``. ``exact``: the buffer's row at an integer position inside
    it, ``sin``/``cos`` of ``p * theta_k`` (float32) elsewhere; gradients reach the positions through the
    analytic value everywhere. ``linear``/``cubic``: the table's rows interpolated (grown beyond the
    buffer with GPT-J's formula where positions need it).
    """
    rows, width = table.shape
    if mode in ("linear", "cubic"):
        grow = table_rows_for(positions, rows)
        rows_table = table.float()
        if grow:  # the buffer's own rows, then GPT-J's formula past them
            rows_table = torch.cat((rows_table, gptj_sincos_table(grow, width, table.device)[rows:]))
        return interpolate_rows(rows_table, positions, mode)
    angle = positions.float()[..., None] * gptj_inv_freq(width, table.device)
    analytic = torch.cat((torch.sin(angle), torch.cos(angle)), dim=-1)
    held = positions.detach()
    whole = (held == held.floor()) & (held >= 0) & (held <= rows - 1)
    own = table[held.long().clamp(0, rows - 1)].float()
    out = torch.where(whole[..., None], own, analytic.detach())
    if analytic.requires_grad:  # the value stays the buffer's row; the gradient is the analytic one
        out = out + (analytic - analytic.detach())
    return out


def _embed_positions(state, attention: nn.Module, position_ids: torch.Tensor) -> torch.Tensor:
    """Stands in for ``GPTJAttention._get_embed_positions``: sin/cos ``[b, n, r]`` of this forward's tokens,
    built once per forward for all layers."""
    return _sincos(state, attention.embed_positions)


def _rotary_forward(state, rotary: nn.Module, x: torch.Tensor, position_ids: torch.Tensor | None = None):
    """Stands in for ``GPTJRotaryEmbedding.forward`` (transformers >= 5.24): ``(sin, cos)``, each ``[b, n, r/2]``,
    at this forward's positions, in ``x``'s dtype as the stock module returns them."""
    sincos = _sincos(state, rotary.embed_positions).to(x.dtype)
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    return sin, cos


def _sincos(state, table: torch.Tensor) -> torch.Tensor:
    """sin|cos ``[b, n, r]`` of this forward's tokens from GPT-J's buffer ``table``, built once per forward."""
    step = state.step
    key = ("gptj_sincos", tuple(table.shape), table.device)
    hit = step.memo.get(key)
    if hit is None:
        positions = step.positions.to(table.device)
        if state.scheme.contributes == "rotary":
            with step.sharing():
                hit = interleaved_sincos(positions, table, state.plan.interpolation or "exact")
        else:  # no rotation: GPT-J's own is switched off
            half = (*positions.shape, table.shape[-1] // 2)
            hit = torch.cat((table.new_zeros(half, dtype=torch.float32), table.new_ones(half, dtype=torch.float32)),
                            dim=-1)
        step.memo[key] = hit
    return hit


def _row_position_ids(module: nn.Module, args: tuple, kwargs: dict):
    """``position_ids = arange(n)`` per row, so each layer's gather reads this forward's sin/cos in order
    (the engine's pre-hook has already checked the caller's ``position_ids`` against the ranks)."""
    embeds = kwargs.get("inputs_embeds")
    if embeds is None:
        return None
    b, n = embeds.shape[:2]
    kwargs["position_ids"] = torch.arange(n, device=embeds.device).expand(b, n)
    return args, kwargs


@dataclass(frozen=True)
class GPTJAdapter(OverrideAdapter):
    """GPT-J (see the module docstring)."""

    def install(self, model: nn.Module, state) -> list[Callable[[], None]]:
        base = model.base_model
        rotary = getattr(base, "rotary_emb", None)
        if type(rotary).__name__ == "GPTJRotaryEmbedding":  # transformers >= 5.24: one module for all layers
            if not isinstance(getattr(rotary, "embed_positions", None), torch.Tensor):
                raise NotImplementedError(
                    f"{type(base).__name__}: expected GPTJRotaryEmbedding with an embed_positions buffer; this "
                    "transformers version differs")
            return [shadow_method(rotary, "forward", functools.partial(_rotary_forward, state, rotary))]
        layers = [m for m in base.modules() if type(m).__name__ in ATTENTION_CLASSES]
        if not layers or not all(isinstance(getattr(m, "embed_positions", None), torch.Tensor)
                                 and hasattr(type(m), "_get_embed_positions") for m in layers):
            raise NotImplementedError(
                f"{type(base).__name__}: expected GPT-J attention layers with an embed_positions buffer read by "
                "_get_embed_positions; this transformers version differs")
        undo = [shadow_method(m, "_get_embed_positions", functools.partial(_embed_positions, state, m))
                for m in layers]
        undo.append(base.register_forward_pre_hook(_row_position_ids, with_kwargs=True).remove)
        return undo


#: GPT-J's own rotary (``native`` = ``rope``: its frequencies, layout and ``rotary_dim``), the sinusoid on
#: the embeddings, or nothing; ALiBi and CoPE would need its attention, which is not transformers' interface
GPTJ = GPTJAdapter(
    name="GPTJ", model_types=("gptj",), native="rope", self_attention=(),
    offers=frozenset({"rotary"}), carries=("sinusoidal", "rope", "none"),
)
