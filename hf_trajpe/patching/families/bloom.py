"""BLOOM: ALiBi built in the model's forward. ``BloomModel.build_alibi_tensor(attention_mask, num_heads,
dtype)`` gives ``m_h * p_j`` per key (``[b * h, 1, t]``, ``p_j`` the rank of key ``j`` among the real
tokens), and each attention adds it to its scores (``alibi.baddbmm``). With the per-query constant
``-m_h p_i`` dropped by the softmax, that is causal ALiBi, ``-m_h (p_i - p_j)``.

The override shadows ``build_alibi_tensor`` on the model instance: the same ``m_h * p_j`` with the
model's own slopes (``_get_alibi_slopes``, including its rule for a head count that is not a power of
two) at the state's key positions (ranks: the stock bias bit for bit; trajectory positions: ALiBi at
fractional positions), and zeros for schemes without a bias. Without an ``attention_mask`` BLOOM
builds the bias inline instead; a forward pre-hook hands it an all-ones mask, so the builder always runs.

Shape legend: ``b`` batch, ``h`` heads, ``t`` keys (cache + new).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ...compat import cache_from_kwargs
from .override import OverrideAdapter, shadow_method

__all__ = ["BLOOM", "BloomAdapter"]


def _alibi(state, slopes_fn: Callable, attention_mask: torch.Tensor, num_heads: int,
           dtype: torch.dtype) -> torch.Tensor:
    """Stands in for ``BloomModel.build_alibi_tensor``: ``[b * h, 1, t]``."""
    b, t = attention_mask.shape
    if state.scheme.contributes != "bias":  # NoPE, or a sinusoid on the embeddings: no bias
        return torch.zeros(b * num_heads, 1, t, dtype=dtype, device=attention_mask.device)
    positions = state.step.key_positions[:, -t:].to(attention_mask.device)
    slopes = slopes_fn(num_heads, positions.device)
    return (slopes[None, :, None] * positions[:, None, :]).reshape(b * num_heads, 1, t).to(dtype)


def _full_mask(module: nn.Module, args: tuple, kwargs: dict):
    """An all-ones ``attention_mask`` (cache + new tokens) where the caller gave none, so BLOOM takes the
    path through ``build_alibi_tensor`` (the same causal mask, the same stock bias)."""
    embeds = kwargs.get("inputs_embeds")
    if embeds is None or kwargs.get("attention_mask") is not None:
        return None
    cache = cache_from_kwargs(kwargs)
    past = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
    kwargs["attention_mask"] = torch.ones(embeds.shape[0], past + embeds.shape[1], dtype=torch.long,
                                          device=embeds.device)
    return args, kwargs


@dataclass(frozen=True)
class BloomAdapter(OverrideAdapter):
    """BLOOM (see the module docstring)."""

    def install(self, model: nn.Module, state) -> list[Callable[[], None]]:
        base = model.base_model
        slopes_fn = getattr(importlib.import_module(type(base).__module__), "_get_alibi_slopes", None)
        if slopes_fn is None or not callable(getattr(type(base), "build_alibi_tensor", None)):
            raise NotImplementedError(
                f"{type(base).__name__}: expected BLOOM's build_alibi_tensor and _get_alibi_slopes; this "
                "transformers version differs")
        return [shadow_method(base, "build_alibi_tensor", functools.partial(_alibi, state, slopes_fn)),
                base.register_forward_pre_hook(_full_mask, with_kwargs=True).remove]


#: ``native`` is the model's ALiBi (``alibi`` too: its own slopes); trajectory reads it at fractional
#: positions. A rotation or CoPE would need its attention, which is not transformers' interface.
BLOOM = BloomAdapter(
    name="Bloom", model_types=("bloom",), native="alibi", self_attention=(),
    offers=frozenset({"attention"}), carries=("sinusoidal", "alibi", "none"),
)
