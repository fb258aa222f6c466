"""RULER's ``string_match_all``: per example the share of its references found in the generated answer
(case-insensitive substring), then the mean over examples. The niah, variable-tracking and word-extraction
tasks score with it. RULER reports it times 100, rounded to two decimals; here it is the fraction."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .registry import Metric, register_metric
from .string_match import check_pairs, found

__all__ = ["per_example", "string_match_all"]


def per_example(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> tuple[np.ndarray, None]:
    check_pairs("string_match_all", predictions, references)
    return np.array([sum(found(p, refs)) / len(refs) for p, refs in zip(predictions, references, strict=True)]), None


def string_match_all(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """``predictions``: one generated answer per example; ``references``: a list of strings per example."""
    scores, _ = per_example(predictions, references)
    return sum(scores.tolist()) / len(scores)


register_metric(Metric(
    name="string_match_all", compute=string_match_all, inputs="generated_text",
    aggregation="mean over examples of the share of references found in the answer", higher_is_better=True,
    label="string match, all", description="share of the reference strings found in the answer, ignoring case",
    unit="%", digits=2, scale=100.0, per_example=per_example))
