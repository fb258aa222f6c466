"""Sinusoidal absolute encoding (docs/spec.md, section 2.2), exact at integer or fractional positions.

Shape legend: ``...`` any leading shape of positions, ``d`` model width.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from .interpolation import InterpolationMode, interpolate_rows

__all__ = ["sinusoidal_frequencies", "sinusoidal_encoding", "SinusoidalTable"]


def _check_dim(dim: int) -> None:
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    if dim % 2:
        raise ValueError(
            f"sinusoidal encoding needs an even dim (it interleaves sin/cos pairs), got dim={dim}; "
            "use an even model width or pad the encoding yourself"
        )


def sinusoidal_frequencies(dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32,
                           device: torch.device | str | None = None) -> torch.Tensor:
    """``w_k = base^(-2k/dim)`` for ``k = 0..dim/2-1``, shape ``[dim/2]``."""
    _check_dim(dim)
    k = torch.arange(0, dim, 2, dtype=torch.float64, device=device)
    return (base ** (-k / dim)).to(dtype)


#: integer positions are split into base-256 digits, one table of angles per digit (positions in
#: [0, 2**24), every integer a float32 holds exactly); beyond, the remainder is rotated in float32
_DIGIT_BITS, _DIGITS = 8, 3
_INT_LIMIT = 2 ** (_DIGIT_BITS * _DIGITS)


@functools.lru_cache(maxsize=32)
def _angle_rows(dim: int, base: float, device: torch.device) -> torch.Tensor:
    """``[3 * 256 + 1, dim]`` float32 angles, interleaved like the output (columns ``2k`` and ``2k+1``).

    Row ``256 j + c`` holds ``c * 256**j * w_k`` reduced to ``[-pi, pi)``, computed in float64 and
    rounded once; the digit-0 rows add ``pi/2`` in the odd columns (``cos x = sin(x + pi/2)``); the
    last row is ``w_k`` in both columns. The angle of ``p = n + r`` is the sum of one row per digit of
    ``n`` plus ``r`` times the last row: every term is at most ``pi`` (``r < 1``), so the float32 sum
    stays within a few ulps of 10 instead of carrying ``p * w_k`` (32,768 at 32k positions, ulp 0.004).
    """
    with torch.inference_mode(False):  # a cached table must not be an inference tensor (autograd saves it)
        return _build_angle_rows(dim, base).to(device=device, dtype=torch.float32)


def _build_angle_rows(dim: int, base: float) -> torch.Tensor:
    w = sinusoidal_frequencies(dim, base, dtype=torch.float64)
    digit = torch.arange(2**_DIGIT_BITS, dtype=torch.float64)[:, None]

    def reduced(x: torch.Tensor) -> torch.Tensor:
        return torch.remainder(x + math.pi, 2 * math.pi) - math.pi

    rows = []
    for j in range(_DIGITS):
        angle = digit * float(2 ** (_DIGIT_BITS * j)) * w
        shift = math.pi / 2 if j == 0 else 0.0
        rows.append(torch.stack((reduced(angle), reduced(angle + shift)), dim=-1).flatten(-2))
    rows.append(torch.stack((w, w), dim=-1).flatten(-2)[None])
    return torch.cat(rows)


def _float32_angles(positions: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """``[..., dim]`` angles of :func:`sinusoidal_encoding` (odd columns shifted by ``pi/2``), reduced so
    float32 keeps them to about 1e-6 rad at any position below 2**24 (one weighted gather). The few ops
    on the positions are kept few: each is a parallel region, costly on a busy CPU."""
    rows = _angle_rows(dim, base, positions.device)
    p = positions.float().reshape(-1)
    # integer part (zero gradient); NaN goes to 0 so that it reaches the remainder and the output
    n = p.detach().floor().nan_to_num_(0.0).clamp_(0, _INT_LIMIT - 1)
    rest = p - n  # exact in float32; the fraction in [0, 1) inside the range, the whole offset outside
    shifts, offsets = _digit_layout(positions.device)
    # one base-256 digit of n per column, each pointing into its own block of rows; the last column's
    # digit is 0 (n < 2**24), so it points at the row of frequencies, weighted by the remainder
    idx = ((n.long()[:, None] >> shifts) & (2**_DIGIT_BITS - 1)).add_(offsets)
    weights = F.pad(rest[:, None], (_DIGITS, 0), value=1.0)
    angles = F.embedding_bag(idx, rows, per_sample_weights=weights, mode="sum")
    return angles.reshape(*positions.shape, dim)


@functools.lru_cache(maxsize=8)
def _digit_layout(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode(False):
        j = torch.arange(_DIGITS + 1, device=device)
        return j * _DIGIT_BITS, j << _DIGIT_BITS


def sinusoidal_encoding(positions: torch.Tensor | int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Interleaved sin/cos encoding evaluated at ``positions``.

    ``positions``: ``[...]`` integer or float tensor (or an int ``L`` meaning ``arange(L)``).
    Returns ``[..., dim]``: component ``2k`` is ``sin(p w_k)``, ``2k+1`` is ``cos(p w_k)``.
    Computed in float32 (float64 if the positions are float64) so bf16 models do not lose the
    fractional part of adapted positions. In float32 the angle ``p w_k`` is not formed directly
    (at ``p`` = 32,768 its rounding alone costs 2e-3): the integer part of ``p`` is read from tables
    of angles built in float64 and reduced modulo ``2 pi``, and the fraction is added to them
    (:func:`_float32_angles`); the result is within 1e-6 of the float64 formula up to 2**24.
    Gradients reach the positions (``d/dp sin(p w) = w cos(p w)``, through the fraction).
    """
    _check_dim(dim)
    if isinstance(positions, int):
        positions = torch.arange(positions)
    if not torch.is_tensor(positions):
        raise TypeError(f"positions must be a tensor or an int, got {type(positions).__name__}")
    if positions.dtype == torch.float64:
        freqs = sinusoidal_frequencies(dim, base, dtype=torch.float64, device=positions.device)
        angles = positions[..., None] * freqs  # [..., d/2]
        # stack on a new last axis then flatten -> sin, cos, sin, cos, ... (interleaved)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    angles = _float32_angles(positions, dim, base)  # [..., d]
    if angles.requires_grad and torch.is_grad_enabled():
        return angles.sin()
    return angles.sin_()  # in place: no second [..., d] buffer


class SinusoidalTable(torch.nn.Module):
    """The seed design's precomputed table, read at fractional positions by interpolation.

    ``mode="exact"`` evaluates the analytic formula instead, so the three modes can be compared
    (docs/encodings.md gives the measured errors).
    """

    def __init__(self, max_positions: int, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        _check_dim(dim)
        if max_positions < 1:
            raise ValueError(f"max_positions must be >= 1, got {max_positions}")
        self.max_positions, self.dim, self.base = max_positions, dim, base
        # built in float64 then rounded once, so the table is the best float32 it can be
        table = sinusoidal_encoding(torch.arange(max_positions, dtype=torch.float64), dim, base)
        self.register_buffer("table", table.float(), persistent=False)

    def forward(self, positions: torch.Tensor, mode: InterpolationMode = "linear") -> torch.Tensor:
        if mode == "exact":
            return sinusoidal_encoding(positions, self.dim, self.base)
        return interpolate_rows(self.table, positions, mode)

    def extra_repr(self) -> str:
        return f"max_positions={self.max_positions}, dim={self.dim}, base={self.base}"
