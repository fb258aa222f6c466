"""Reading a table of position vectors at fractional positions (SPEC section 2).

Used for the seed design's sinusoidal table and for learned absolute tables (GPT-2, BERT), whose
rows exist only at integer positions. Shape legend: ``n`` table rows, ``d`` width, ``...`` any
leading shape of positions.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["InterpolationMode", "INTERPOLATION_MODES", "interpolate_rows"]

InterpolationMode = Literal["linear", "cubic", "exact"]
INTERPOLATION_MODES: tuple[str, ...] = ("linear", "cubic", "exact")


def interpolate_rows(table: torch.Tensor, positions: torch.Tensor, mode: str = "linear") -> torch.Tensor:
    """``table``: ``[n, d]``; ``positions``: ``[...]`` -> ``[..., d]``.

    Positions are clamped to ``[0, n-1]``. Integer-valued positions return table rows bit for bit
    in both modes (the interpolation weights are exactly 0 and 1 there). Gradients reach the table
    and, through the fractional part, the positions.
    ``cubic`` is Catmull-Rom (a cubic through four neighbouring rows, indices clamped at the ends).
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
    p = positions.to(torch.float32).clamp(0, n - 1)
    floor = p.floor()
    t = (p - floor)[..., None].to(table.dtype)
    i0 = floor.long()
    i1 = (i0 + 1).clamp(max=n - 1)
    if mode == "linear":
        return torch.lerp(table[i0], table[i1], t)
    im1 = (i0 - 1).clamp(min=0)
    i2 = (i0 + 2).clamp(max=n - 1)
    t2, t3 = t * t, t * t * t
    w_m1 = 0.5 * (-t3 + 2 * t2 - t)
    w_0 = 0.5 * (3 * t3 - 5 * t2 + 2)
    w_1 = 0.5 * (-3 * t3 + 4 * t2 + t)
    w_2 = 0.5 * (t3 - t2)
    return w_m1 * table[im1] + w_0 * table[i0] + w_1 * table[i1] + w_2 * table[i2]
