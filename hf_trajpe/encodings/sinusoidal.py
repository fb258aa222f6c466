"""Sinusoidal absolute encoding (docs/spec.md, section 2.2), exact at integer or fractional positions.

Shape legend: ``...`` any leading shape of positions, ``d`` model width.
"""

from __future__ import annotations

import torch

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


def sinusoidal_encoding(positions: torch.Tensor | int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Interleaved sin/cos encoding evaluated at ``positions``.

    ``positions``: ``[...]`` integer or float tensor (or an int ``L`` meaning ``arange(L)``).
    Returns ``[..., dim]``: component ``2k`` is ``sin(p w_k)``, ``2k+1`` is ``cos(p w_k)``.
    Computed in float32 (float64 if the positions are float64) so bf16 models do not lose the
    fractional part of adapted positions.
    """
    _check_dim(dim)
    if isinstance(positions, int):
        positions = torch.arange(positions)
    if not torch.is_tensor(positions):
        raise TypeError(f"positions must be a tensor or an int, got {type(positions).__name__}")
    compute_dtype = torch.float64 if positions.dtype == torch.float64 else torch.float32
    freqs = sinusoidal_frequencies(dim, base, dtype=compute_dtype, device=positions.device)
    angles = positions.to(compute_dtype)[..., None] * freqs  # [..., d/2]
    if angles.requires_grad and torch.is_grad_enabled():
        # stack on a new last axis then flatten -> sin, cos, sin, cos, ... (interleaved)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    # no graph needed: write sin and cos straight into the interleaved slots (saves a copy, ~1.5x)
    out = angles.new_empty(*angles.shape[:-1], dim)
    torch.sin(angles, out=out[..., 0::2])
    torch.cos(angles, out=out[..., 1::2])
    return out


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
