"""Reading a table of position vectors at fractional positions (docs/spec.md, section 2.7).

Used for the seed design's sinusoidal table and for learned absolute tables (GPT-2, BERT), whose
rows exist only at integer positions. Shape legend: ``n`` table rows, ``d`` width, ``...`` any
leading shape of positions.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

__all__ = ["InterpolationMode", "INTERPOLATION_MODES", "interpolate_rows"]

InterpolationMode = Literal["linear", "cubic", "exact"]
INTERPOLATION_MODES: tuple[str, ...] = ("linear", "cubic", "exact")


def interpolate_rows(table: torch.Tensor, positions: torch.Tensor, mode: str = "linear") -> torch.Tensor:
    """``table``: ``[n, d]``; ``positions``: ``[...]`` -> ``[..., d]``.

    Positions are clamped to ``[0, n-1]``. Integer-valued positions return table rows bit for bit
    in both modes (the interpolation weights are exactly 0 and 1 there). Gradients reach the table
    and, through the fractional part, the positions.
    ``cubic`` is Catmull-Rom (a cubic through four neighbouring rows; rows past the ends are
    extrapolated quadratically).
    """
    if table.dim() != 2:
        raise ValueError(f"table must be [rows, width], got shape {tuple(table.shape)}")
    if mode not in ("linear", "cubic"):
        raise ValueError(
            f"unknown interpolation mode {mode!r} for a table; use 'linear' or 'cubic' "
            "('exact' exists only for analytic encodings)"
        )
    n = table.shape[0]
    if not positions.is_floating_point():
        return table[positions.clamp(0, n - 1)]
    # float64 positions stay float64; anything else is read in float32
    p = (positions if positions.dtype == torch.float64 else positions.float()).clamp(0, n - 1)
    floor = p.floor()
    t = (p - floor)[..., None].to(table.dtype)
    i0 = floor.long()
    i1 = (i0 + 1).clamp(max=n - 1)
    if mode == "linear":
        return _linear_rows(table, i0, i1, t)
    r0, r1 = table[i0], table[i1]
    # rows past either end are extrapolated by the quadratic through the three end rows; repeating
    # the end row instead bends the curve and costs 4x the interior error there
    r_m1, r2 = table[(i0 - 1).clamp(min=0)], table[(i0 + 2).clamp(max=n - 1)]
    if n >= 3:
        first = 3 * table[0] - 3 * table[1] + table[2]
        last = 3 * table[n - 1] - 3 * table[n - 2] + table[n - 3]
        r_m1 = torch.where((i0 == 0)[..., None], first, r_m1)
        r2 = torch.where((i0 + 2 > n - 1)[..., None], last, r2)
    t2, t3 = t * t, t * t * t
    w_m1 = 0.5 * (-t3 + 2 * t2 - t)
    w_0 = 0.5 * (3 * t3 - 5 * t2 + 2)
    w_1 = 0.5 * (-3 * t3 + 4 * t2 + t)
    w_2 = 0.5 * (t3 - t2)
    return w_m1 * r_m1 + w_0 * r0 + w_1 * r1 + w_2 * r2


def _linear_rows(table: torch.Tensor, i0: torch.Tensor, i1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``(1 - t) * table[i0] + t * table[i1]`` as one weighted gather (``embedding_bag``, two rows per
    bag) rather than two gathers and a lerp: a third of the memory traffic, about the cost of a plain
    lookup (docs/benchmarks.md). ``t``: ``[..., 1]``. Weights (1, 0) give the row bit for bit.

    CUDA has no bfloat16/float16 backward for the weights of ``embedding_bag`` (torch 2.11): there, two
    gathers and a weighted sum, the same value."""
    if i0.numel() == 0:
        return table[i0]
    if table.is_cuda and table.dtype in (torch.bfloat16, torch.float16):
        return (1 - t) * table[i0] + t * table[i1]
    idx = torch.stack((i0, i1), dim=-1).reshape(-1, 2)
    weights = torch.cat((1 - t, t), dim=-1).reshape(-1, 2)
    out = F.embedding_bag(idx, table, per_sample_weights=weights, mode="sum")
    return out.reshape(*i0.shape, table.shape[1])
