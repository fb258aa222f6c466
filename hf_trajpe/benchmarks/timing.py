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

from .intervals import DECIDE_MARGIN, HALF_WIDTH, paired_interval, relative_half_width, undecided

__all__ = ["CLOCKS", "side_by_side", "stopwatch", "sync", "wall"]

#: what a measurement returns: named figures in seconds (``{"seconds": 0.8}``, or several)
Metrics = Mapping[str, float]
#: how a measurement is timed: ``wall`` (elapsed time, the default; synchronised on CUDA) or ``cpu`` (the
#: process's CPU time, on the CPU only: other jobs on the machine then cost the measured run nothing but cache
#: and memory bandwidth, where elapsed time also counts every moment the scheduler gave the core to them)
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work; why: CUDA kernels run asynchronously, host clocks would miss them."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def check_clock(clock: str, device: torch.device | str | None = None) -> Callable[[], float]:
    """The timer of :data:`CLOCKS` named ``clock``; the CPU clock is refused on a GPU (it would miss the kernels)."""
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}; use one of {', '.join(CLOCKS)}")
    if clock == "cpu" and device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"the cpu clock times the CPU work of this process and would miss the GPU kernels on "
                         f"{device}; use --clock wall there")
    return CLOCKS[clock]


@contextlib.contextmanager
def stopwatch(device: torch.device | str | None = None, clock: str = "wall") -> Iterator[list[float]]:
    """``with stopwatch(dev) as t: ...`` then ``t[0]`` holds the seconds, synchronised on CUDA."""
    timer = check_clock(clock, device)
    out: list[float] = []
    sync(device)
    start = timer()
    yield out
    sync(device)
    out.append(timer() - start)


def wall(fn: Callable[[], object], device: torch.device | str | None = None, clock: str = "wall") -> float:
    """Seconds of one call of ``fn`` (on ``clock``: elapsed by default)."""
    with stopwatch(device, clock) as t:
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
    limits: Mapping[str, float] | None = None,
    decide_budget_s: float | None = None,
    decide_max_rounds: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, object]:
    """Each variant against stock, paired: in every round each variant's measurement sits next to a
    stock one, the order alternating between rounds (stock first in even rounds).

    ``measure()`` returns named figures in seconds; ``context(None)`` is the stock model,
    ``context(name)`` the patched one (set-up and tear-down are not timed). ``warmup`` rounds of stock
    and every variant run first, unrecorded. Then ``repeats`` rounds of every variant; if
    ``max_rounds`` is larger, rounds are added two at a time (both orders) for the variants whose
    interval of a ``watch`` figure (default: all) is still wider than ``+-half_width``, until none is,
    ``max_rounds`` is reached or ``budget_s`` seconds of rounds are spent (checked between pairs).

    Then the targets decide (``limits``: variant -> the limit its first ``watch`` figure is held to): a
    variant whose verdict is still ``unresolved`` although its point is more than
    :data:`~.intervals.DECIDE_MARGIN` (2%) from its limit gets more pairs of rounds, until its interval
    decides, ``decide_max_rounds`` rounds are reached or ``decide_budget_s`` seconds of these rounds are
    spent (``None``: no limit of that kind; both ``None`` and no limits: no such rounds). ``clock`` measures
    the budgets (a fake one in tests).

    Returns, per figure: the stock median (over all stock runs), and per variant its median, the
    median of the paired ratios (``paired_ratio``, the headline figure) with its bootstrap interval
    (``interval``, ``rounds``, ``half_width``; see intervals.py) and, for reference, the ratio of the
    medians (unpaired). ``stopped`` says why the rounds ended: ``converged``, ``max_rounds``,
    ``budget`` or ``fixed`` (no adaptive rounds asked for); ``decide`` what the deciding rounds did
    (``rounds_added`` per variant and ``stopped``: ``decided``, ``max_rounds``, ``budget`` or ``none``).
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

    def done(name: str) -> int:
        return len(next(iter(paired[name].values())))

    def pair_for(names: Sequence[str]) -> None:
        for _ in range(2):  # both orders
            for name in names:
                one(name, done(name) % 2 == 0)

    def still_open(name: str) -> bool:
        keys = watch if watch is not None else list(paired[name])
        return any(relative_half_width(paired_interval(paired[name][k])) > half_width for k in keys)

    start = clock()
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
        if budget_s is not None and clock() - start >= budget_s:
            stopped = "budget"
            break
        for r in (rounds, rounds + 1)[: max_rounds - rounds]:
            for name in open_:
                one(name, done(name) % 2 == 0)
            if progress is not None:
                progress(f"round {r + 1}/{max_rounds}: {len(open_)} of {len(variants)} variants still wider "
                         f"than +-{half_width:.0%}")
        rounds += min(2, max_rounds - rounds)
    if stopped == "max_rounds" and not any(still_open(name) for name in variants):
        stopped = "converged"  # the last rounds narrowed them all
    decide = _decide(variants, paired, limits or {}, watch, decide_budget_s, decide_max_rounds, clock, done,
                     pair_for, progress)
    stock_med = {key: statistics.median(ts) for key, ts in stock.items()}
    out: dict[str, object] = {
        "repeats": repeats, "max_rounds": max_rounds, "budget_s": budget_s, "half_width_goal": half_width,
        "rounds": max(done(name) for name in variants) if variants else rounds, "stopped": stopped,
        "decide": decide, "wall_s": round(clock() - start, 1),
        "stock": stock_med, "variants": {},
    }
    for name in variants:
        out["variants"][name] = {key: _figures(ts, paired[name][key], stock_med[key])
                                 for key, ts in patched[name].items()}
    return out


def _decide(variants: Sequence[str], paired: dict, limits: Mapping[str, float], watch: Sequence[str] | None,
            budget_s: float | None, max_rounds: int | None, clock: Callable[[], float], done: Callable[[str], int],
            pair_for: Callable[[Sequence[str]], None], progress: Callable[[str], None] | None) -> dict[str, object]:
    """The deciding rounds of :func:`side_by_side`: pairs of rounds for the variants whose target is
    unresolved more than :data:`DECIDE_MARGIN` away from its limit."""
    held = [name for name in variants if name in limits]
    added = {name: 0 for name in held}
    result = {"budget_s": budget_s, "max_rounds": max_rounds, "margin": DECIDE_MARGIN, "rounds_added": added,
              "stopped": "none"}
    if not held or (budget_s is None and max_rounds is None):
        return result

    def key(name: str) -> str:
        return watch[0] if watch else next(iter(paired[name]))

    def open_(name: str) -> bool:
        return undecided(paired_interval(paired[name][key(name)]), limits[name])

    start = clock()
    while True:
        waiting = [name for name in held if open_(name)]
        result["stopped"] = "decided" if not waiting else result["stopped"]
        if not waiting:
            break
        names = [name for name in waiting if max_rounds is None or done(name) + 2 <= max_rounds]
        if not names:
            result["stopped"] = "max_rounds"
            break
        if budget_s is not None and clock() - start >= budget_s:
            result["stopped"] = "budget"
            break
        pair_for(names)
        for name in names:
            added[name] += 2
        if progress is not None:
            progress(f"deciding: {len(names)} target(s) unresolved more than {DECIDE_MARGIN:.0%} from the limit, "
                     f"rounds {', '.join(f'{n} {done(n)}' for n in names)}")
    return result


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
