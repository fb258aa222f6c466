"""RULER's ``string_match_part``: per example 1 if any of its references is in the generated answer
(case-insensitive substring), else 0; then the mean over examples. RULER's question-answering tasks score with
it. RULER reports it times 100, rounded to two decimals; here it is the fraction."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .registry import Metric, register_metric
from .string_match import check_pairs, found

__all__ = ["per_example", "string_match_part"]


def per_example(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> tuple[np.ndarray, None]:
    check_pairs("string_match_part", predictions, references)
    return np.array([max(found(p, refs)) for p, refs in zip(predictions, references, strict=True)]), None


def string_match_part(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """``predictions``: one generated answer per example; ``references``: a list of strings per example."""
    scores, _ = per_example(predictions, references)
    return sum(scores.tolist()) / len(scores)


register_metric(Metric(
    name="string_match_part", compute=string_match_part, inputs="generated_text",
    aggregation="mean over examples of 1 (any reference found in the answer) or 0", higher_is_better=True,
    label="string match, part", description="any of the reference strings found in the answer, ignoring case",
    unit="%", digits=2, scale=100.0, per_example=per_example))
