"""From a :class:`~.runner.RulerTable`'s rows to what the report shows: mean scores with intervals per cell
and pooled (by length, task, haystack), paired comparisons against a baseline method, effective lengths.

Effective length (RULER, Hsieh et al. 2024, section 4): the longest length at which a model still scores
at least a threshold. RULER's threshold is an absolute 85.6% (Llama-2-7B at 4K); here it is
``ratio * the baseline method's score at reference_length`` (default: 0.85 of the baseline at the shortest
length), so the question is "up to which length does a method keep most of what the model as loaded does
inside its window". Choose ``reference_length`` inside the model's trained window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .stats import INTERVAL_METHOD, effective_length, score_interval, sign_test

__all__ = ["DEFAULT_RATIO", "summarize"]

DEFAULT_RATIO = 0.85


def _groups(rows: Iterable[dict], keys: Sequence[str]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for row in rows:
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return out


def _cells(rows: list[dict], keys: Sequence[str], level: float) -> list[dict]:
    cells = []
    for key, members in _groups(rows, keys).items():
        scores = [r["score"] for r in members]
        lo, hi = score_interval(scores, level)
        cells.append(dict(zip(keys, key, strict=True)) | {"n": len(scores), "score": float(np.mean(scores)),
                                                          "ci": [lo, hi]})
    return cells


def _prompt_key(row: dict) -> tuple:
    return row["task"], row["haystack"], row["length"], row["index"]


def _comparisons(rows: list[dict], methods: list[str], baseline: str, level: float, n_resamples: int) -> list[dict]:
    by_method = {m: {_prompt_key(r): r["score"] for r in rows if r["method"] == m} for m in methods}
    base = by_method[baseline]
    out = []
    for method in methods:
        if method == baseline:
            continue
        common = [k for k in by_method[method] if k in base]
        for length in ["all", *sorted({k[2] for k in common})]:
            keys = [k for k in common if length == "all" or k[2] == length]
            if keys:
                test = sign_test([by_method[method][k] for k in keys], [base[k] for k in keys],
                                 n_resamples=n_resamples, level=level)
                out.append({"method": method, "baseline": baseline, "length": length} | test)
    return out


def summarize(table: dict, baseline: str | None = None, reference_length: int | None = None,
              ratio: float = DEFAULT_RATIO, level: float = 0.95, n_resamples: int = 2000) -> dict:
    """The report's numbers from ``table`` (:meth:`RulerTable.to_dict`)."""
    rows, methods = table["rows"], list(table["meta"]["methods"])
    if not rows:
        raise ValueError("no RULER results to summarize")
    baseline = baseline or methods[0]
    if baseline not in methods:
        raise ValueError(f"baseline {baseline!r} is not among the methods {methods}")
    lengths = sorted({r["length"] for r in rows})
    reference_length = reference_length or lengths[0]
    if reference_length not in lengths:
        raise ValueError(f"the reference length {reference_length} was not run; run it or pick one of {lengths}")
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"the effective-length ratio must be in (0, 1], got {ratio}")
    by_length = _cells(rows, ("method", "length"), level)
    scores = {(c["method"], c["length"]): c["score"] for c in by_length}
    reference = scores[(baseline, reference_length)]
    threshold = ratio * reference
    effective = {m: {"length": effective_length({L: scores[(m, L)] for L in lengths if (m, L) in scores}, threshold)}
                 for m in methods}
    return {
        "level": level, "interval": INTERVAL_METHOD,
        "comparison_test": "exact two-sided sign test on the prompts where the scores differ (exact McNemar for "
                           "0/1 scores); mean paired difference with a percentile bootstrap interval over prompts (an "
                           "exact Clopper-Pearson bound where every prompt differs alike: no zero-width interval)",
        "cells": _cells(rows, ("method", "task", "haystack", "length"), level),
        "by_length": by_length,
        "by_task": _cells(rows, ("method", "task", "length"), level),
        "by_haystack": _cells(rows, ("method", "haystack", "length"), level),
        "comparisons": _comparisons(rows, methods, baseline, level, n_resamples),
        "effective_length": {"baseline": baseline, "reference_length": reference_length, "reference_score": reference,
                             "ratio": ratio, "threshold": threshold, "methods": effective},
    }
