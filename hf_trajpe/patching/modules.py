"""Replacement modules: stand-ins for a model's own position table and rotary module that read the
positions of the current forward from the :class:`~.state.PatchState`.

Shape legend: ``b`` batch, ``n`` new tokens, ``d`` width, ``r`` rotary width.
"""

from __future__ import annotations

import torch
from torch import nn

from .families.structure import rotary_frequencies
from .layer_frequencies import ROTARY_FREQUENCIES
from .rope_scaling import DYNAMIC_ROPE_TYPES
from .state import STATE_ATTR, PatchState, bind_state

__all__ = ["PatchedPositionTable", "PatchedRotary"]


class PatchedPositionTable(nn.Module):
    """Stands in for a learned position table (``nn.Embedding``). Keeps the table as ``weight`` (same
    parameter, same state-dict key) and returns the positional vectors of the current forward,
    whatever ``position_ids`` the model passes: ``[b, n, d]`` (or ``[1, 1, d]`` zeros when the
    scheme adds nothing to the embeddings).
    """

    def __init__(self, stock: nn.Embedding, state: PatchState) -> None:
        super().__init__()
        self.weight = stock.weight
        self.num_embeddings, self.embedding_dim = stock.num_embeddings, stock.embedding_dim
        self.padding_idx = stock.padding_idx
        bind_state(self, state)

    def forward(self, *args, **kwargs) -> torch.Tensor:
        """Whatever the model passes (``position_ids``; OPT: the mask and the cache length) is ignored."""
        return self.__dict__[STATE_ATTR].additive(self.weight, self.weight)

    def extra_repr(self) -> str:
        st = self.__dict__.get(STATE_ATTR)
        return f"{self.num_embeddings}, {self.embedding_dim}, hf_trajpe={st.describe() if st else 'detached'}"


class PatchedRotary(nn.Module):
    """Stands in for a model's rotary module: ``cos``/``sin`` ``[b, n, r]`` at the positions of the
    current forward (fractional for trajectory), or the identity rotation (``cos=1, sin=0``) when the
    scheme does not rotate or rotates inside attention (``rotary_fraction``). Keeps the stock module (its
    non-persistent ``inv_freq``) as ``stock``; a module with frequencies per layer type (``<type>_inv_freq``,
    e.g. Gemma 3) is called with the type.

    ``frequencies``: the module whose frequencies are used, the stock one by default, or (context extension)
    an instance of the same class built from the extended config. A ``dynamic`` or ``longrope`` module
    updates its frequencies from the sequence length inside its forward; it is called first with the
    model's ``position_ids`` (one row: the largest), so its own code decides them as in the stock model.
    """

    def __init__(self, stock: nn.Module, state: PatchState, frequencies: nn.Module | None = None) -> None:
        super().__init__()
        self.stock = stock
        if frequencies is not None:
            self.frequencies = frequencies
        bind_state(self, state)

    def _source(self, x: torch.Tensor, position_ids: torch.Tensor | None, layer_type: str | None) -> nn.Module:
        source = self._modules.get("frequencies", self.stock)
        rope_type = getattr(source, "rope_type", "default")
        rope_type = rope_type.get(layer_type, "default") if isinstance(rope_type, dict) else rope_type
        if rope_type in DYNAMIC_ROPE_TYPES:
            st: PatchState = self.__dict__[STATE_ATTR]
            if position_ids is None:  # the ranks of this forward, continuing after the cache
                position_ids = st.step.positions.detach().ceil().long()
            last = position_ids.max().reshape(1, 1).to(x.device)
            with torch.no_grad():
                source(x, last, **({"layer_type": layer_type} if layer_type is not None else {}))
        return source

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor | None = None, layer_type: str | None = None):
        st: PatchState = self.__dict__[STATE_ATTR]
        positions = st.step.positions
        inv_freq, attention_scaling = rotary_frequencies(self._source(x, position_ids, layer_type), layer_type)
        if st.plan.hook != "rotary":  # no rotation, or one inside attention (rotary_fraction, a remap): none here
            st.step.memo[ROTARY_FREQUENCIES, layer_type] = (inv_freq, attention_scaling)
            shape = (1, positions.shape[1], 2 * inv_freq.shape[0])
            return (torch.ones(shape, dtype=x.dtype, device=x.device),
                    torch.zeros(shape, dtype=x.dtype, device=x.device))
        return st.scheme.rotary_cos_sin(positions, inv_freq, attention_scaling, x.dtype)

    def extra_repr(self) -> str:
        st = self.__dict__.get(STATE_ATTR)
        return f"hf_trajpe={st.describe() if st else 'detached'}"
