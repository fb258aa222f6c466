"""MPT: ALiBi built in the model's forward. ``MptModel.build_mpt_alibi_tensor(num_heads, max_seq_len,
alibi_bias_max=8)`` gives ``m_h * (j - (L - 1))`` per key index ``j`` (``[h, 1, L]``; slopes
``2^(-alibi_bias_max * k / H)`` over the next power of two ``H``, interleaved when the head count is
not one), and each attention adds its last ``t`` columns to the scores: ``-m_h (t - 1 - j)``, causal
ALiBi up to the per-query constant the softmax drops. Positions are key indices: pads count.

The override shadows ``build_mpt_alibi_tensor`` on the model instance: ``m_h * (p_j - p_last)`` at the
state's key positions (``p_last``: the row's newest token), with the model's own slopes (read from its
builder, with the ``alibi_bias_max`` the model passes). At ranks without padding that is the stock bias
bit for bit; with padding, ranks (a left-padded row equals the sequence alone); with trajectory
positions, ALiBi at fractional positions. Schemes without a bias get ``None`` (MPT then adds nothing).

MPT's attention takes a bias of three dimensions only (``[h, q, k]``: one for the whole batch), and
positions differ per row; :class:`RowBias` stands in for it (see there).

Shape legend: ``b`` batch, ``h`` heads, ``t`` keys (cache + new).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .override import OverrideAdapter, shadow_method

__all__ = ["MPT", "MptAdapter", "RowBias"]


class RowBias:
    """A bias ``[b, h, 1, t]`` (one per batch row) presented as MPT's ``[h, 1, t]``: ``shape``, ``size`` and
    slicing act on the last three dimensions, as MPT's attention checks and crops its bias, and adding it
    to the scores ``[b, h, q, t]`` (a torch function, routed here by ``__torch_function__``) adds the
    per-row tensor. Not a tensor: MPT's code only checks, slices and adds it."""

    def __init__(self, bias: torch.Tensor) -> None:
        self.bias = bias

    @property
    def shape(self) -> torch.Size:
        return self.bias.shape[1:]

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def __getitem__(self, index) -> RowBias:
        index = index if isinstance(index, tuple) else (index,)
        return RowBias(self.bias[(slice(None), *index)])

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        unwrap = [a.bias if isinstance(a, RowBias) else a for a in args]
        return func(*unwrap, **(kwargs or {}))

    def __repr__(self) -> str:
        return f"RowBias({tuple(self.bias.shape)})"


def _alibi(state, builder: Callable, num_heads: int, sequence_length: int, alibi_bias_max: int = 8,
           device: torch.device | None = None) -> RowBias | None:
    """Stands in for ``MptModel.build_mpt_alibi_tensor``: the bias at this forward's key positions."""
    if state.scheme.contributes != "bias":  # NoPE, or a sinusoid on the embeddings: no bias
        return None
    positions = state.step.key_positions.to(device)
    # the model's own slopes: its bias at distance 1 (exact: (-1) * m_h, negated)
    slopes = -builder(num_heads, 2, alibi_bias_max, device)[:, 0, 0]
    distance = positions - positions[:, -1:]
    return RowBias(distance[:, None, None, :] * slopes[None, :, None, None])


@dataclass(frozen=True)
class MptAdapter(OverrideAdapter):
    """MPT (see the module docstring)."""

    def install(self, model: nn.Module, state) -> list[Callable[[], None]]:
        base = model.base_model
        builder = getattr(importlib.import_module(type(base).__module__), "build_mpt_alibi_tensor", None)
        if builder is None or not callable(getattr(type(base), "build_mpt_alibi_tensor", None)):
            raise NotImplementedError(
                f"{type(base).__name__}: expected MPT's build_mpt_alibi_tensor; this transformers version differs")
        return [shadow_method(base, "build_mpt_alibi_tensor", functools.partial(_alibi, state, builder))]


#: ``native`` is the model's ALiBi (``alibi`` too: its own slopes); trajectory reads it at fractional
#: positions. A rotation or CoPE would need its attention, which is not transformers' interface.
MPT = MptAdapter(
    name="Mpt", model_types=("mpt",), native="alibi", self_attention=(),
    offers=frozenset({"attention"}), carries=("sinusoidal", "alibi", "none"),
)
