"""ALiBi: a linear distance penalty on attention scores (Press et al., 2022; docs/spec.md, section 2.4).

Shape legend: ``b`` batch, ``h`` heads, ``i`` query positions, ``j`` key positions.
"""

from __future__ import annotations

import math

import torch

__all__ = ["alibi_slopes", "alibi_bias"]


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
    return [start * start**i for i in range(n)]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Per-head slopes ``m_h``, float32 ``[h]``.

    For a power of two ``H``: ``2^(-8h/H)``, ``h = 1..H``. Otherwise the paper's reference rule:
    the slopes of the nearest lower power of two, then every other slope of the next power of two.
    """
    if not isinstance(num_heads, int) or isinstance(num_heads, bool) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")

    def slopes(n: int) -> list[float]:
        if math.log2(n).is_integer():
            return _power_of_two_slopes(n)
        closest = 2 ** math.floor(math.log2(n))
        return _power_of_two_slopes(closest) + slopes(2 * closest)[0::2][: n - closest]

    return torch.tensor(slopes(num_heads), dtype=torch.float32)


def alibi_bias(
    slopes: torch.Tensor,
    query_positions: torch.Tensor,
    key_positions: torch.Tensor | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Additive score bias ``-m_h * (p_i - p_j)`` (causal) or ``-m_h * |p_i - p_j|`` (bidirectional).

    ``slopes``: ``[h]``; positions: ``[i]`` or ``[b, i]`` (keys ``[j]``/``[b, j]``, default the
    queries), integer or fractional. Returns float32 ``[b or 1, h, i, j]``. For causal models
    only ``j <= i`` is meaningful: masking the future stays the attention mask's job.
    """
    if key_positions is None:
        key_positions = query_positions
    q = query_positions.to(torch.float32)
    k = key_positions.to(torch.float32)
    if q.dim() == 1:
        q = q[None]
    if k.dim() == 1:
        k = k[None]
    if q.dim() != 2 or k.dim() != 2:
        raise ValueError(
            f"positions must be [seq] or [batch, seq], got query {tuple(query_positions.shape)} and "
            f"key {tuple(key_positions.shape)}"
        )
    distance = q[:, :, None] - k[:, None, :]  # [b, i, j]
    if not causal:
        distance = distance.abs()
    m = slopes.to(device=distance.device, dtype=torch.float32)
    return -m[None, :, None, None] * distance[:, None]
