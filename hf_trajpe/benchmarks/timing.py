"""Side-by-side timing: variants are measured in turn against the stock model, rounds repeat, medians
are compared.

Running the variants in turn (rather than one after another in blocks) exposes them to the same
background load, so their ratio is meaningful on a shared machine even when absolute times drift.
:func:`side_by_side` goes one step further and pairs every patched measurement with a stock one
right next to it (order alternating between rounds), so each round yields a paired ratio.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch

__all__ = ["interleaved_medians", "side_by_side", "stopwatch", "sync", "wall"]

#: what a measurement returns: named figures in seconds (``{"seconds": 0.8}``, or several)
Metrics = Mapping[str, float]


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work; why: CUDA kernels run asynchronously, host clocks would miss them."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def stopwatch(device: torch.device | str | None = None) -> Iterator[list[float]]:
    """``with stopwatch(dev) as t: ...`` then ``t[0]`` holds the seconds, synchronised on CUDA."""
    out: list[float] = []
    sync(device)
    start = time.perf_counter()
    yield out
    sync(device)
    out.append(time.perf_counter() - start)


def wall(fn: Callable[[], object], device: torch.device | str | None = None) -> float:
    """Seconds of one call of ``fn``."""
    with stopwatch(device) as t:
        fn()
    return t[0]


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
            times[name].append(wall(fn, device))
    return {name: statistics.median(ts) for name, ts in times.items()}


def side_by_side(
    measure: Callable[[], Metrics],
    variants: Sequence[str],
    context: Callable[[str | None], contextlib.AbstractContextManager],
    repeats: int = 5,
    warmup: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Each variant against stock, paired: in every round each variant's measurement sits next to a
    stock one, the order alternating between rounds.

    ``measure()`` returns named figures in seconds; ``context(None)`` is the stock model,
    ``context(name)`` the patched one (set-up and tear-down are not timed). ``warmup`` rounds of stock
    and every variant run first, unrecorded. Returns, per figure: the stock median (over all stock
    runs), and per variant its median, the ratio of medians and the median of the paired ratios.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")

    def run(name: str | None) -> Metrics:
        with context(name):
            return measure()

    for _ in range(warmup):
        run(None)
        for name in variants:
            run(name)
    stock: dict[str, list[float]] = {}
    patched: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    paired: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    for r in range(repeats):
        for name in variants:
            if r % 2 == 0:
                s, v = run(None), run(name)
            else:
                v, s = run(name), run(None)
            for key, sec in s.items():
                stock.setdefault(key, []).append(sec)
                patched[name].setdefault(key, []).append(v[key])
                paired[name].setdefault(key, []).append(v[key] / sec)
        if progress is not None:
            progress(f"round {r + 1}/{repeats}")
    stock_med = {key: statistics.median(ts) for key, ts in stock.items()}
    out: dict[str, object] = {"repeats": repeats, "stock": stock_med, "variants": {}}
    for name in variants:
        out["variants"][name] = {
            key: {
                "median": statistics.median(ts),
                "ratio_of_medians": statistics.median(ts) / stock_med[key],
                "paired_ratio": statistics.median(paired[name][key]),
            }
            for key, ts in patched[name].items()
        }
    return out
