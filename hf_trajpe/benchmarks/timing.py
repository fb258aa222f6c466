"""Side-by-side timing: variants are measured in turn against the stock model, rounds repeat, paired
ratios are summarised by their median and a bootstrap interval (intervals.py).

Running the variants in turn (rather than one after another in blocks) exposes them to the same
background load, so their ratio is meaningful on a shared machine even when absolute times drift.
:func:`side_by_side` goes one step further and pairs every patched measurement with a stock one
right next to it (order alternating between rounds), so each round yields a paired ratio, and adds
rounds until the intervals are narrow enough or a round/time budget is spent.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch

from .intervals import HALF_WIDTH, paired_interval, relative_half_width

__all__ = ["side_by_side", "stopwatch", "sync", "wall"]

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


def side_by_side(
    measure: Callable[[], Metrics],
    variants: Sequence[str],
    context: Callable[[str | None], contextlib.AbstractContextManager],
    repeats: int = 6,
    warmup: int = 1,
    progress: Callable[[str], None] | None = None,
    max_rounds: int | None = None,
    budget_s: float | None = None,
    half_width: float = HALF_WIDTH,
    watch: Sequence[str] | None = None,
) -> dict[str, object]:
    """Each variant against stock, paired: in every round each variant's measurement sits next to a
    stock one, the order alternating between rounds (stock first in even rounds).

    ``measure()`` returns named figures in seconds; ``context(None)`` is the stock model,
    ``context(name)`` the patched one (set-up and tear-down are not timed). ``warmup`` rounds of stock
    and every variant run first, unrecorded. Then ``repeats`` rounds of every variant; if
    ``max_rounds`` is larger, rounds are added two at a time (both orders) for the variants whose
    interval of a ``watch`` figure (default: all) is still wider than ``+-half_width``, until none is,
    ``max_rounds`` is reached or ``budget_s`` seconds of rounds are spent (checked between pairs).

    Returns, per figure: the stock median (over all stock runs), and per variant its median, the
    median of the paired ratios (``paired_ratio``, the headline figure) with its bootstrap interval
    (``interval``, ``rounds``, ``half_width``; see intervals.py) and, for reference, the ratio of the
    medians (unpaired). ``stopped`` says why the rounds ended: ``converged``, ``max_rounds``,
    ``budget`` or ``fixed`` (no adaptive rounds asked for).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    max_rounds = repeats if max_rounds is None else max(max_rounds, repeats)

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

    def one(name: str, stock_first: bool) -> None:
        if stock_first:
            s, v = run(None), run(name)
        else:
            v, s = run(name), run(None)
        for key, sec in s.items():
            stock.setdefault(key, []).append(sec)
            patched[name].setdefault(key, []).append(v[key])
            paired[name].setdefault(key, []).append(v[key] / sec)

    def still_open(name: str) -> bool:
        keys = watch if watch is not None else list(paired[name])
        return any(relative_half_width(paired_interval(paired[name][k])) > half_width for k in keys)

    start = time.perf_counter()
    for r in range(repeats):
        for name in variants:
            one(name, r % 2 == 0)
        if progress is not None:
            progress(f"round {r + 1}/{repeats}" + (f" (up to {max_rounds})" if max_rounds > repeats else ""))
    stopped = "fixed" if max_rounds == repeats else "max_rounds"
    rounds = repeats
    while rounds < max_rounds:
        open_ = [name for name in variants if still_open(name)]
        if not open_:
            stopped = "converged"
            break
        if budget_s is not None and time.perf_counter() - start >= budget_s:
            stopped = "budget"
            break
        for r in (rounds, rounds + 1)[: max_rounds - rounds]:
            for name in open_:
                one(name, len(paired[name][next(iter(paired[name]))]) % 2 == 0)
            if progress is not None:
                progress(f"round {r + 1}/{max_rounds}: {len(open_)} of {len(variants)} variants still wider "
                         f"than +-{half_width:.0%}")
        rounds += min(2, max_rounds - rounds)
    if stopped == "max_rounds" and not any(still_open(name) for name in variants):
        stopped = "converged"  # the last rounds narrowed them all
    stock_med = {key: statistics.median(ts) for key, ts in stock.items()}
    out: dict[str, object] = {
        "repeats": repeats, "max_rounds": max_rounds, "budget_s": budget_s, "half_width_goal": half_width,
        "rounds": rounds, "stopped": stopped, "wall_s": round(time.perf_counter() - start, 1),
        "stock": stock_med, "variants": {},
    }
    for name in variants:
        out["variants"][name] = {key: _figures(ts, paired[name][key], stock_med[key])
                                 for key, ts in patched[name].items()}
    return out


def _figures(seconds: list[float], ratios: list[float], stock_median: float) -> dict[str, object]:
    iv = paired_interval(ratios)
    return {
        "median": statistics.median(seconds),
        "paired_ratio": iv["point"],
        "interval": [iv["low"], iv["high"]],
        "rounds": iv["rounds"],
        "half_width": relative_half_width(iv),
        "ratio_of_medians": statistics.median(seconds) / stock_median,
    }
