"""The cos/sin of one forward for RoPE inside attention (models without a rotary module), built once per
forward and shared by all layers, and the rotation of the new keys on their way into the KV cache.

Read by the attention functions (attention_inputs.py) and by the cache wrapper (cached_keys.py); takes the
patch state by duck typing (``plan``, ``scheme``, ``step``), so it imports neither.

Shape legend: ``b`` batch, ``h`` heads, ``n`` new tokens, ``t`` keys, ``d`` head width.
"""

from __future__ import annotations

import torch

from ..encodings.rotary import rotary_inv_freq
from .rotation import inference_tables, rotate_part

__all__ = ["key_tables", "query_tables", "rotate_new_keys"]


def _frequencies(st, width: int, device) -> tuple[torch.Tensor, float]:
    """``inv_freq`` and ``attention_scaling`` of a rotation inside attention over ``width`` dimensions:
    ``rope_theta``'s, or the context extension's (transformers' formulas, computed once per device)."""
    scaling = st.plan.rope_scaling
    if scaling is None:
        memo = st.__dict__.setdefault("_rope_inv_freq", {})
        key = (width, device)
        if key not in memo:
            memo[key] = rotary_inv_freq(width, st.plan.rope_theta, device=device)
        return memo[key], 1.0
    memo = st.__dict__.setdefault("_rope_frequencies", {})
    key = (width, device)
    if key not in memo:
        from .rope_scaling import attention_rope_frequencies

        memo[key] = attention_rope_frequencies(scaling, width, device)
    return memo[key]


def _tables(st, positions: torch.Tensor, head_dim: int, dtype: torch.dtype, device) -> tuple:
    """``(cos, sin, inference tables)``: the arguments of :func:`~.rotation.rotate`."""
    inv, scale = _frequencies(st, head_dim, device)
    cos, sin = st.scheme.rotary_cos_sin(positions, inv, scale, dtype)
    return cos, sin, inference_tables(cos, sin)


def query_tables(st, head_dim: int, dtype: torch.dtype, device) -> tuple:
    """``(cos, sin, tables)`` (``[b, n, d]``; :func:`~.rotation.rotate`'s arguments) at the positions of this
    forward's new tokens (memoised per forward)."""
    memo, key = st.step.memo, ("rope_q", head_dim, dtype)
    if key not in memo:
        with st.step.sharing():
            memo[key] = _tables(st, st.step.positions, head_dim, dtype, device)
    return memo[key]


def key_tables(st, kv: int, head_dim: int, dtype: torch.dtype, device) -> tuple:
    """The same ``[b, t, d]`` at the positions of the last ``kv`` keys (the new tokens' when ``kv`` is
    their number)."""
    if kv == st.step.positions.shape[1]:
        return query_tables(st, head_dim, dtype, device)
    memo, key = st.step.memo, ("rope_k", head_dim, dtype, kv)
    if key not in memo:
        with st.step.sharing():
            memo[key] = _tables(st, st.step.key_positions[:, -kv:], head_dim, dtype, device)
    return memo[key]


def rotate_new_keys(st, keys: torch.Tensor, layer_idx: int | None = None) -> torch.Tensor:
    """The keys of this forward's new tokens ``[b, g, n, d]``, rotated at their positions (their first
    ``rotary_width`` dimensions where the patch rotates part of each head); the same for every layer
    (``layer_idx``)."""
    width = st.plan.rotary_width or keys.shape[-1]
    return rotate_part(keys, *query_tables(st, width, keys.dtype, keys.device))
