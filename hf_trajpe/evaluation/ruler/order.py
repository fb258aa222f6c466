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
  the needle tasks: each prompt's share of the extensions that found its needle (one value per prompt, since one
  prompt's outcomes under several extensions are not independent trials), real prompts against generated ones by a
  permutation test (not paired across haystacks); the found and missed counts per haystack beside it;
- **secondary comparisons** (Holm within themselves): the leading extensions pairwise at the main length, and at
  each later length every extension against the baseline and the leading ones pairwise.

"A orders above B" when A's paired mean is higher and the Holm-adjusted p-value is below the plan's level; otherwise
the data cannot resolve them, and the interval of the difference says by how much they may differ.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .stats import holm, permutation_test, score_interval, sign_test

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
    """What pairs two methods' rows: the prompt (its hash too, so rows of another prompt generator never pair)."""
    return row["task"], row["haystack"], int(row["length"]), int(row["index"]), row.get("prompt_sha1")


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
        for (task, hay, length, *_), score in scores.items():
            groups.setdefault((task, hay, length), []).append(score)
            lengths.setdefault(length, []).append(score)
        cells += [{"method": method, "task": t, "haystack": h, "length": n, **_cell(v)}
                  for (t, h, n), v in sorted(groups.items())]
        pooled += [{"method": method, "length": n, **_cell(v)} for n, v in sorted(lengths.items())]
    return cells, pooled


def _retention(by: dict[str, dict[tuple, float]], plan: OrderPlan) -> list[dict]:
    """Pooled score at each length over the same method's at the reference length, on the prompts (task, haystack
    and index) that both lengths have."""
    out = []
    for method, scores in by.items():
        at_length: dict[int, dict[tuple, float]] = {}
        for (task, hay, length, index, _), score in scores.items():
            at_length.setdefault(length, {})[(task, hay, index)] = score
        ref = at_length.get(plan.reference_length, {})
        for length in sorted(set(at_length) - {plan.reference_length}):
            common = sorted(set(at_length[length]) & set(ref))
            if not common:
                continue
            mean = sum(at_length[length][k] for k in common) / len(common)
            base = sum(ref[k] for k in common) / len(common)
            out.append({"method": method, "length": length, "mean": mean, "reference_mean": base,
                        "retention": mean / base if base > 0 else None, "n": len(common)})
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
    """Real against generated haystacks of the needle tasks at ``length``: per prompt, the share of the extensions
    that found the needle; the two groups of prompts compared by a permutation test."""
    per_prompt: dict[tuple, list[float]] = {}
    for m in plan.extensions:
        for key, score in by.get(m, {}).items():
            task, hay, n = key[:3]
            if n == length and task.startswith(plan.needle_prefix):
                per_prompt.setdefault(key, []).append(float(score == 1.0))

    def shares(haystacks) -> list[float]:
        return [sum(v) / len(v) for k, v in per_prompt.items() if k[1] in haystacks]

    real, generated = shares(plan.real_haystacks), shares(plan.generated_haystacks)
    if not real or not generated:
        return None
    test = permutation_test(real, generated)
    per_kind = {}
    for hay in (*plan.real_haystacks, *plan.generated_haystacks):
        found = [x for k, v in per_prompt.items() if k[1] == hay for x in v]
        if found:
            per_kind[hay] = {"found": int(sum(found)), "n": len(found), "prompts": len(shares((hay,)))}
    return {"a": "real text", "b": "generated text", "length": length,
            "test": f"permutation test ({test['method']}) on each prompt's share of extensions that found it",
            "n": len(real) + len(generated), "n_a": len(real), "n_b": len(generated), "mean_a": sum(real) / len(real),
            "mean_b": sum(generated) / len(generated), "diff": test["diff"], "per_haystack": per_kind,
            "p_value": test["p_value"]}


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
