"""Run the benchmarks, collect one JSON-able result with the machine, and check the cost targets.

Targets (docs/spec.md, section 6), each checked on the side-by-side figures of the same run:

- a training step of a trajectory-patched model: at most 3% slower than stock (paired ratio <= 1.03);
- per-token greedy decoding with the KV cache: at most 3% slower (paired ratio <= 1.03);
- peak memory of a training step: at most 5% more (ratio <= 1.05, weights included);
- trajectory positions + encoding: within 2x of a plain sinusoidal table lookup;
- ALiBi at long context (aims): forward time at most 1.2x stock SDPA, peak memory of a forward at most 1.15x;
- the remaps past the trained length: prefill time, decoding per token and peak memory of the prefill, against
  the limits of the remap benchmark.

A time target is ``met`` only when the 95% interval of its paired ratio lies within the limit, ``missed``
only when it lies above, ``unresolved`` otherwise (intervals.py). Memory is counted, not timed: one
deterministic figure, met or missed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

import torch

from .alibi import bench_alibi
from .decode import bench_decode
from .encoding import bench_encoding, sinusoid_accuracy
from .intervals import verdict
from .machine import machine_info
from .memory import bench_memory
from .models import bench_models
from .remap import bench_remap
from .setup import MODELS, Rounds, Size, rounds_for
from .targets import BASE_OF, ENCODING_TARGET_VARIANTS, TARGETS
from .timing import check_clock

__all__ = ["BENCHMARKS", "run_benchmarks", "check_targets", "TARGETS"]

BENCHMARKS = ("encoding", "models", "decode", "memory", "alibi", "remap")


def _encoding(size: Size, device: str, dtype: torch.dtype, rounds: Rounds,
              progress: Callable[[str], None]) -> dict[str, object]:
    runs = []
    for seq in size.encoding_seqs:
        shape = f"batch {size.encoding_batch} x {seq} tokens x {size.encoding_dim}"
        progress(f"encoding: {shape}, {rounds.repeats}-{rounds.max_rounds} paired rounds")
        runs.append(bench_encoding(size.encoding_batch, seq, size.encoding_dim, device=device, dtype=dtype,
                                   progress=lambda s, shape=shape: progress(f"encoding: {shape} {s}"),
                                   clock=rounds.clock, **rounds.side_by_side()))
    accuracy = sinusoid_accuracy(size.encoding_dim)
    return {**rounds.describe(), "runs": runs, "sinusoid_accuracy": accuracy}


def run_benchmarks(
    size: Size,
    which: Sequence[str] = BENCHMARKS,
    families: Sequence[str] = MODELS,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    repeats: int | None = None,
    progress: Callable[[str], None] = print,
    max_rounds: int | None = None,
    budget_s: float | None = None,
    decide_budget_s: float | None = None,
    decide_max_rounds: int | None = None,
    clock: str = "wall",
) -> dict[str, object]:
    """Run ``which`` benchmarks at ``size``; returns ``{"meta": ..., <benchmark>: ..., "targets": [...]}``.

    ``repeats``/``max_rounds``/``budget_s`` override the size's paired rounds (at least, at most) and
    seconds of rounds per measured figure set, ``decide_budget_s``/``decide_max_rounds`` those of the
    rounds that decide unresolved targets, for every timed benchmark; ``clock``: ``wall`` or ``cpu``
    (timing.CLOCKS)."""
    unknown = [w for w in which if w not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS)}")
    check_clock(clock, device)
    start = time.perf_counter()
    t0 = start

    def tick(msg: str) -> None:
        progress(f"[{time.perf_counter() - t0:6.0f} s] {msg}")

    def rounds(benchmark: str) -> Rounds:
        return rounds_for(size, benchmark, repeats, max_rounds, budget_s, decide_budget_s, decide_max_rounds, clock)

    result: dict[str, object] = {"meta": dict(machine_info(device, dtype), size=size.name, clock=clock)}
    common = dict(device=device, dtype=dtype, progress=tick)
    for name in which:
        b0 = time.perf_counter()
        if name == "encoding":
            result[name] = _encoding(size, rounds=rounds(name), **common)
        elif name == "models":
            result[name] = bench_models(size, families, rounds=rounds(name), **common)
        elif name == "decode":
            result[name] = bench_decode(size, families, rounds=rounds(name), **common)
        elif name == "memory":
            result[name] = bench_memory(size, families, **common)
        elif name == "alibi":
            result[name] = bench_alibi(size, rounds=rounds(name), **common)
        elif name == "remap":
            result[name] = bench_remap(size, rounds=rounds(name), **common)
        result[name]["wall_s"] = round(time.perf_counter() - b0, 1)
        tick(f"{name} done in {result[name]['wall_s']:.0f} s")
    meta = result["meta"]
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    try:
        meta["load_average_end"] = list(os.getloadavg())
    except OSError:
        pass
    result["targets"] = check_targets(result)
    return result


def _row(target: str, where: str, variant: str, figure: dict, base: dict | None = None) -> dict[str, object]:
    """``figure``: a timed figure of ``side_by_side`` (paired ratio, interval, rounds) or, for memory,
    ``{"paired_ratio": ratio}`` alone (deterministic: no interval). ``base``: the same figure for the
    variant's base encoding at integer positions (None if n/a)."""
    limit, what = TARGETS[target]
    point = figure["paired_ratio"]
    interval = figure.get("interval")
    rounds = None if interval is None else figure["rounds"]  # (counted, not timed: no interval, no rounds)
    if limit is None:
        result = "no limit"
    elif interval is None:
        result = "met" if point <= limit else "missed"
    else:
        result = verdict({"point": point, "low": interval[0], "high": interval[1], "rounds": rounds}, limit)
    return {"target": target, "what": what, "where": where, "variant": variant, "measured": point,
            "interval": interval, "rounds": rounds, "half_width": figure.get("half_width"),
            "ratio_of_medians": figure.get("ratio_of_medians"), "limit": limit, "verdict": result,
            "base_encoding": BASE_OF.get(variant),
            "base_measured": None if base is None else base["paired_ratio"],
            "base_interval": None if base is None else base.get("interval")}


def check_targets(result: dict[str, object]) -> list[dict[str, object]]:
    """One row per (target, model or length, trajectory variant) present in ``result``."""
    rows: list[dict[str, object]] = []

    def timed(target: str, family: str, res: dict, key: str) -> None:
        figs = res["variants"]
        for label in figs:
            if label in BASE_OF:
                base = figs.get(BASE_OF[label], {}).get(key)
                rows.append(_row(target, family, label, figs[label][key], base))

    for family, r in result.get("models", {}).get("models", {}).items():
        timed("train_step", family, r["train_step"], "seconds")
    for family, r in result.get("decode", {}).get("models", {}).items():
        timed("decode_per_token", family, r, "per_token_s")
    for family, r in result.get("memory", {}).get("models", {}).items():
        for label, m in r["variants"].items():
            if label in BASE_OF:
                base = r["variants"].get(BASE_OF[label])
                rows.append(_row("memory", family, label, {"paired_ratio": m["total_ratio"]},
                                 None if base is None else {"paired_ratio": base["total_ratio"]}))
    for target, key, counted in (("alibi_time", "alibi", False), ("alibi_memory", "alibi", True),
                                 ("remap_time", "remap", False), ("remap_decode", "remap", False),
                                 ("remap_memory", "remap", True)):
        res = result.get(key)
        if res is not None:
            rows += _long_context(target, res, counted)
    for run in result.get("encoding", {}).get("runs", []):
        for label in ENCODING_TARGET_VARIANTS:
            where = f"{run['shape']['batch']} x {run['shape']['seq']} x {run['shape']['dim']}"
            rows.append(_row("encoding", where, label, run["paired"][label]))
    return rows


def _long_context(target: str, res: dict, counted: bool) -> list[dict[str, object]]:
    """Rows of the ALiBi or remap benchmark (the small Llama at ``res["tokens"]``): forward time or peak memory
    of a forward (total) of each variant against stock."""
    where = f"llama, 1 x {res['tokens']} tokens"
    if "read" in res:  # the remaps: a prefill and decoding per token from generate() (remap.py)
        if counted:
            variants = res["memory"]["prefill"]["variants"]
            return [_row(target, where, label, {"paired_ratio": m["total_ratio"]}) for label, m in variants.items()]
        figure = "per_token_s" if target == "remap_decode" else "prefill_s"
        return [_row(target, where, label, f[figure]) for label, f in res["read"]["variants"].items()]
    if counted:
        variants = res["memory"]["forward"]["variants"]
        return [_row(target, where, label, {"paired_ratio": m["total_ratio"]}) for label, m in variants.items()]
    return [_row(target, where, label, f["seconds"]) for label, f in res["forward"]["variants"].items()]
