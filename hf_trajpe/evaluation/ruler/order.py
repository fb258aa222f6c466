"""Which ways of extending a model RULER can order: scores per cell, retention, and declared comparisons corrected
for their number.

A plan (:class:`OrderPlan`, declared before the data) names the baseline (the model as it is), the extensions,
the length inside the window that retention is measured against, the length of the primary comparisons and the
later ones, and the haystacks of real and of generated text. From the rows of a RULER run (any number of sittings:
only prompts every compared method has read are paired), :func:`analyse` gives:

- **cells**: the mean score per method, task, haystack and length, with its exact interval
  (:func:`~.stats.score_interval`), and the same pooled over tasks and haystacks;
- **retention**: a method's pooled score at a length over its own at the reference length, over the same prompts;
- **primary comparisons** (Holm over the family): at the main length, each extension against the baseline (paired
  prompts, the exact sign test: McNemar for 0/1 scores), and real text against generated text as a haystack of
  the needle tasks, pooled over the extensions (prompts not paired: Fisher's exact test on found and missed);
- **secondary comparisons** (Holm within themselves): the leading extensions pairwise at the main length, and at
  each later length every extension against the baseline and the leading ones pairwise.

"A orders above B" when A's paired mean is higher and the Holm-adjusted p-value is below the plan's level; otherwise
the data cannot resolve them, and the interval of the difference says by how much they may differ.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .stats import fisher_exact, holm, score_interval, sign_test

__all__ = ["OrderPlan", "analyse"]


@dataclass(frozen=True)
class OrderPlan:
    """The declared part of an order table: who is compared with whom, at which lengths, at which level."""

    baseline: str
    extensions: tuple[str, ...]
    reference_length: int
    main_length: int
    later_lengths: tuple[int, ...] = ()
    real_haystacks: tuple[str, ...] = ("real_code", "real_prose")
    generated_haystacks: tuple[str, ...] = ("noise",)
    needle_prefix: str = "niah_"
    leading: int = 3
    level: float = 0.05

    @property
    def methods(self) -> tuple[str, ...]:
        return (self.baseline, *self.extensions)


def _key(row: dict) -> tuple:
    return row["task"], row["haystack"], int(row["length"]), int(row["index"])


def _by_method(rows: Iterable[dict]) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for row in rows:
        out.setdefault(row["method"], {})[_key(row)] = float(row["score"])
    return out


def _cell(scores: Sequence[float]) -> dict:
    lo, hi = score_interval(scores)
    return {"n": len(scores), "mean": sum(scores) / len(scores), "ci": [lo, hi]}


def _cells(by: dict[str, dict[tuple, float]]) -> tuple[list[dict], list[dict]]:
    cells, pooled = [], []
    for method, scores in by.items():
        groups: dict[tuple, list[float]] = {}
        lengths: dict[int, list[float]] = {}
        for (task, hay, length, _), score in scores.items():
            groups.setdefault((task, hay, length), []).append(score)
            lengths.setdefault(length, []).append(score)
        cells += [{"method": method, "task": t, "haystack": h, "length": n, **_cell(v)}
                  for (t, h, n), v in sorted(groups.items())]
        pooled += [{"method": method, "length": n, **_cell(v)} for n, v in sorted(lengths.items())]
    return cells, pooled


def _retention(by: dict[str, dict[tuple, float]], plan: OrderPlan) -> list[dict]:
    """Pooled score at each length over the same method's at the reference length, on prompts of the same tasks
    and haystacks that both lengths have."""
    out = []
    for method, scores in by.items():
        ref = {(t, h): [] for (t, h, n, _) in scores if n == plan.reference_length}
        for (t, h, n, _), s in scores.items():
            if n == plan.reference_length:
                ref[(t, h)].append(s)
        for length in sorted({n for (_, _, n, _) in scores} - {plan.reference_length}):
            at = [(t, h, s) for (t, h, n, _), s in scores.items() if n == length and (t, h) in ref]
            if not at:
                continue
            groups = {(t, h) for t, h, _ in at}
            base = [s for g in groups for s in ref[g]]
            base_mean = sum(base) / len(base)
            mean = sum(s for *_, s in at) / len(at)
            out.append({"method": method, "length": length, "mean": mean, "reference_mean": base_mean,
                        "retention": mean / base_mean if base_mean > 0 else None, "n": len(at),
                        "reference_n": len(base)})
    return out


def _paired(by: dict[str, dict[tuple, float]], a: str, b: str, length: int) -> dict | None:
    keys = sorted(k for k in by.get(a, {}) if k[2] == length and k in by.get(b, {}))
    if not keys:
        return None
    test = sign_test([by[a][k] for k in keys], [by[b][k] for k in keys])
    return {"a": a, "b": b, "length": length, "test": "exact sign test on paired prompts (McNemar for 0/1 scores)",
            "n": test["n"], "mean_a": sum(by[a][k] for k in keys) / len(keys),
            "mean_b": sum(by[b][k] for k in keys) / len(keys), "diff": test["diff"], "ci": test["ci"],
            "wins": test["wins"], "losses": test["losses"], "ties": test["ties"], "p_value": test["p_value"]}


def _content(by: dict[str, dict[tuple, float]], plan: OrderPlan, length: int) -> dict | None:
    """Real against generated haystacks of the needle tasks at ``length``, pooled over the extensions."""
    def rows(haystacks):
        return [s for m in plan.extensions for (t, h, n, _), s in by.get(m, {}).items()
                if n == length and h in haystacks and t.startswith(plan.needle_prefix)]

    real, generated = rows(plan.real_haystacks), rows(plan.generated_haystacks)
    if not real or not generated:
        return None
    found_r, found_g = sum(s == 1.0 for s in real), sum(s == 1.0 for s in generated)
    per_kind = {}
    for hay in (*plan.real_haystacks, *plan.generated_haystacks):
        got = rows((hay,))
        if got:
            per_kind[hay] = {"found": int(sum(s == 1.0 for s in got)), "n": len(got)}
    return {"a": "real text", "b": "generated text", "length": length,
            "test": "Fisher's exact test on found and missed (prompts not paired across haystacks)",
            "n": len(real) + len(generated), "mean_a": found_r / len(real), "mean_b": found_g / len(generated),
            "diff": found_r / len(real) - found_g / len(generated), "found_a": int(found_r), "n_a": len(real),
            "found_b": int(found_g), "n_b": len(generated), "per_haystack": per_kind,
            "p_value": fisher_exact(int(found_r), len(real), int(found_g), len(generated))}


def _leading(pooled: list[dict], plan: OrderPlan, length: int) -> list[str]:
    at = {c["method"]: c["mean"] for c in pooled if c["length"] == length and c["method"] in plan.extensions}
    return sorted(at, key=lambda m: (-at[m], plan.extensions.index(m)))[:plan.leading]


def _family(comparisons: list[dict | None], plan: OrderPlan) -> list[dict]:
    done = [c for c in comparisons if c is not None]
    for c, adjusted in zip(done, holm([c["p_value"] for c in done]), strict=True):
        c["p_holm"] = adjusted
        higher, lower = (c["a"], c["b"]) if c["diff"] > 0 else (c["b"], c["a"])
        c["verdict"] = (f"{higher} orders above {lower}" if adjusted < plan.level and c["diff"] != 0 else
                        "the data cannot resolve them")
    return done


def analyse(rows: Iterable[dict], plan: OrderPlan) -> dict:
    """The cells, retention and the declared comparisons of ``rows`` (RULER rows: ``method``, ``task``,
    ``haystack``, ``length``, ``index``, ``score``) under ``plan`` (module docstring)."""
    by = _by_method(r for r in rows if r["method"] in plan.methods)
    cells, pooled = _cells(by)
    main = plan.main_length
    primary = _family([_paired(by, m, plan.baseline, main) for m in plan.extensions]
                      + [_content(by, plan, main)], plan)
    secondary_list = [_paired(by, a, b, main) for a, b in itertools.combinations(_leading(pooled, plan, main), 2)]
    for length in plan.later_lengths:
        secondary_list += [_paired(by, m, plan.baseline, length) for m in plan.extensions]
        secondary_list += [_paired(by, a, b, length)
                           for a, b in itertools.combinations(_leading(pooled, plan, length), 2)]
    return {"plan": {k: getattr(plan, k) for k in plan.__dataclass_fields__}, "cells": cells, "pooled": pooled,
            "retention": _retention(by, plan), "primary": primary, "secondary": _family(secondary_list, plan),
            "leading": {n: _leading(pooled, plan, n) for n in (main, *plan.later_lengths)}}
