"""Causal ALiBi as one more query/key dimension, so that SDPA keeps its fused kernels.

Causal ALiBi adds ``-m_h (p_i - p_j) = m_h p_j - m_h p_i`` to the scores. The row term ``-m_h p_i`` is
the same for every key of a softmax row and cancels, so the bias is a key term ``m_h p_j`` (BLOOM builds
it that way, ``[b, h, 1, t]``). A term that is a product of a query-side factor and a key-side factor is
a dot product: with ``q' = [q, m_h / scale]``, ``k' = [k, p_j - c]`` and ``v' = [v, 0]``, SDPA's scores
``scale * q'.k'`` are the ALiBi scores (``c``: a constant per sequence, which cancels as well). SDPA
then needs no float mask: with no padding it keeps ``is_causal`` and its fused causal kernel, forward and
backward, instead of a ``[b, h, n, t]`` float mask (which loses the causal kernel, and in training, when
the mask needs a gradient, falls back to the math kernel that keeps the attention matrix of every layer).
The gradient into the key positions flows through the extra key column; the one into the query positions
is zero (the row term cancels), as it is, up to rounding, on the float-mask path.

The slope rides on the query so that grouped key/value heads (GQA) share one key column. Rounding: the
term enters the scores at magnitude ``m_h |p_j - c|`` (at most ``m_h n / 2`` with ``c`` half the last
position), so in float32 the scores of a long sequence carry an absolute error of about ``m_h n 2**-25``
(6e-5 at 4,096 tokens and ``m_h = 1/2``): the size of the rounding of float32 trajectory positions
themselves. 16-bit dtypes would lose far more (bfloat16 keeps 8 bits), so they keep the float mask.

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``n`` queries, ``t`` keys, ``d`` head width.
"""

from __future__ import annotations

import torch

from .subnormals import widen

__all__ = ["KEY_BIAS_DTYPES", "augmented_qkv"]

#: dtypes whose scores take the key term without visible rounding (see the module docstring)
KEY_BIAS_DTYPES = (torch.float32, torch.float64)


def centred_key_term(key_positions: torch.Tensor) -> torch.Tensor:
    """``p_j - c`` ``[b, t]``, with ``c`` half the largest position of each row (detached: a constant per
    softmax row has no gradient), which halves the largest magnitude the scores carry."""
    centre = key_positions.detach().amax(dim=1, keepdim=True) * 0.5
    return key_positions - centre


def augmented_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_factor: torch.Tensor,
                  key_term: torch.Tensor, scaling: float, value_scale: float = 1.0,
                  grad_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``q' = [q, head_factor_h / scaling]`` ``[b, h, n, d+1]``, ``k' = [k, key_term_j]`` ``[b, g, t, d+1]``,
    ``v' = [v * value_scale, 0]``: ``scaling * q'.k' = scaling * q.k + head_factor_h * key_term_j``; the
    output's last column is zero and is dropped by the caller, who also divides it by ``value_scale``.
    ``head_factor``: ``[h]``; ``key_term``: ``[b, t]`` (the last ``t`` columns are used). The gradients of
    the inputs are divided by ``grad_scale`` (by ``grad_scale / value_scale`` for ``value``): the caller
    multiplies the output's gradient by ``grad_scale / value_scale`` (subnormals.py). Each tensor is
    written in one pass."""
    t = key.shape[2]
    dtype = query.dtype
    q_extra = (head_factor.to(device=query.device, dtype=torch.promote_types(dtype, torch.float32)) / scaling).to(dtype)
    q_extra = q_extra[None, :, None, None]  # [1, h, 1, 1], broadcast by widen
    k_extra = key_term[:, -t:].to(dtype)[:, None, :, None]  # [b, 1, t, 1]
    v_extra = value.new_zeros(1)
    inverse = 1.0 / grad_scale
    return (widen(query, q_extra, 1.0, inverse), widen(key, k_extra, 1.0, inverse),
            widen(value, v_extra, value_scale, value_scale * inverse))
