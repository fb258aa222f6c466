"""Encoding-only cost: trajectory positions + the base encoding against a plain table lookup.

The baseline is what a learned-absolute model does per forward: ``table[position_ids]``. Also the
accuracy of the exact sinusoid in float32 at long positions (:func:`sinusoid_accuracy`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from ..encodings import SinusoidalTable, sinusoidal_encoding, trajectory_positions
from .targets import limits_for
from .timing import side_by_side, wall

__all__ = ["BASELINE", "bench_encoding", "sinusoid_accuracy"]

BASELINE = "table lookup (baseline)"


def bench_encoding(
    batch: int = 8,
    seq: int = 2048,
    dim: int = 768,
    repeats: int = 10,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    max_rounds: int | None = None,
    budget_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    decide_budget_s: float | None = None,
    decide_max_rounds: int | None = None,
    clock: str = "wall",
) -> dict[str, object]:
    """Per variant: median seconds and its paired ratio against the lookup (with its interval), one shape.

    Paired rounds as for the models (timing.side_by_side): each variant runs right next to a lookup,
    the order alternating; ``repeats`` rounds at least, up to ``max_rounds`` while an interval is wider
    than +-2% and ``budget_s`` lasts; then the 2x target's variants get rounds until decided, within
    ``decide_max_rounds`` and ``decide_budget_s`` (timing.side_by_side), timed on ``clock``."""
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
        "trajectory positions only": trajectory_positions_only,
        "sinusoidal exact, integer positions": sinusoidal_exact_integer,
        "trajectory + sinusoidal exact": trajectory_exact,
        "trajectory + sinusoidal table (linear)": trajectory_linear,
    }
    current: list[Callable[[], torch.Tensor]] = [lookup]

    @contextlib.contextmanager
    def context(name: str | None) -> Iterator[None]:
        current[0] = lookup if name is None else variants[name]
        yield

    with torch.no_grad():
        res = side_by_side(lambda: {"seconds": wall(current[0], device, clock)}, list(variants), context, repeats,
                           warmup=1, progress=progress, max_rounds=max_rounds, budget_s=budget_s,
                           limits=limits_for("encoding", variants), decide_budget_s=decide_budget_s,
                           decide_max_rounds=decide_max_rounds)
    figs = {name: f["seconds"] for name, f in res["variants"].items()}
    return {
        "shape": {"batch": batch, "seq": seq, "dim": dim, "dtype": str(dtype).replace("torch.", ""),
                  "device": device},
        "repeats": repeats,
        "rounds": res["rounds"],
        "stopped": res["stopped"],
        "decide": res["decide"],
        "seconds": {BASELINE: res["stock"]["seconds"], **{k: f["median"] for k, f in figs.items()}},
        "ratio_vs_lookup": {BASELINE: 1.0, **{k: f["paired_ratio"] for k, f in figs.items()}},
        "paired": figs,
    }


def sinusoid_accuracy(dim: int = 768, max_position: int = 32768, samples: int = 4096) -> dict[str, object]:
    """Largest error of :func:`sinusoidal_encoding` in float32 against the float64 formula, at uniformly
    random fractional positions below ``max_position`` and the integers just below and at it."""
    g = torch.Generator().manual_seed(0)
    pos = torch.cat((torch.rand(samples, generator=g, dtype=torch.float64) * max_position,
                     torch.arange(max_position - 7, max_position + 1, dtype=torch.float64))).float()
    got = sinusoidal_encoding(pos, dim).double()
    want = sinusoidal_encoding(pos.double(), dim)  # float64 positions: the plain formula in float64
    return {"dim": dim, "max_position": max_position, "positions": int(pos.numel()),
            "max_abs_error": float((got - want).abs().max())}
