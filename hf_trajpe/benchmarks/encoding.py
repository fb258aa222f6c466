"""Encoding-only cost: trajectory positions + the base encoding against a plain table lookup.

The baseline is what a learned-absolute model does per forward: ``table[position_ids]``.
"""

from __future__ import annotations

import torch

from ..encodings import SinusoidalTable, sinusoidal_encoding, trajectory_positions
from .timing import interleaved_medians

__all__ = ["bench_encoding"]


def bench_encoding(
    batch: int = 8,
    seq: int = 2048,
    dim: int = 768,
    repeats: int = 7,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, object]:
    """Median seconds and ratios against the lookup, for one shape."""
    g = torch.Generator().manual_seed(0)
    emb = (torch.randn(batch, seq, dim, generator=g) * 0.05).to(device=device, dtype=dtype)
    table = SinusoidalTable(seq, dim).to(device)
    lookup_table = table.table.to(dtype)
    ids = torch.arange(seq, device=device).expand(batch, seq)

    def lookup() -> torch.Tensor:
        return lookup_table[ids]

    def sinusoidal_exact_integer() -> torch.Tensor:
        return sinusoidal_encoding(ids, dim).to(dtype)

    def trajectory_exact() -> torch.Tensor:
        return sinusoidal_encoding(trajectory_positions(emb, strength=0.2), dim).to(dtype)

    def trajectory_linear() -> torch.Tensor:
        return table(trajectory_positions(emb, strength=0.2), "linear").to(dtype)

    def trajectory_positions_only() -> torch.Tensor:
        return trajectory_positions(emb, strength=0.2)

    variants = {
        "table lookup (baseline)": lookup,
        "trajectory positions only": trajectory_positions_only,
        "sinusoidal exact, integer positions": sinusoidal_exact_integer,
        "trajectory + sinusoidal exact": trajectory_exact,
        "trajectory + sinusoidal table (linear)": trajectory_linear,
    }
    with torch.no_grad():
        med = interleaved_medians(variants, repeats=repeats, device=device)
    base = med["table lookup (baseline)"]
    return {
        "shape": {"batch": batch, "seq": seq, "dim": dim, "dtype": str(dtype).replace("torch.", ""),
                  "device": device},
        "repeats": repeats,
        "seconds": med,
        "ratio_vs_lookup": {k: v / base for k, v in med.items()},
    }
