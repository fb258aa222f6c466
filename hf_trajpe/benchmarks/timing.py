"""Interleaved timing: every variant runs once per round, rounds repeat, medians are compared.

Running the variants in turn (rather than one after another in blocks) exposes them to the same
background load, so their ratio is meaningful on a shared machine even when absolute times drift.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import torch

__all__ = ["interleaved_medians", "sync"]


def sync(device: torch.device | str | None = None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(
    variants: Mapping[str, Callable[[], object]],
    repeats: int = 7,
    warmup: int = 1,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Median seconds per call of each variant over ``repeats`` interleaved rounds."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}
