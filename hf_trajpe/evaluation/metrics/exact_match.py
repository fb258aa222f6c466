"""Exact match: the share of examples whose every answer token is predicted right (teacher-forced arg-max)."""

from __future__ import annotations

import numpy as np

from .registry import Metric, register_metric

__all__ = ["exact_match", "per_example"]


def exact_match(correct, count) -> float:
    """``correct``, ``count``: ``[N]`` right answer tokens and answer tokens of each example; the share of
    examples with all of them right."""
    return float(np.mean(np.asarray(correct) == np.asarray(count)))


def per_example(correct, count) -> tuple[np.ndarray, None]:
    """1.0 where every answer token of the example is right, else 0.0; unweighted."""
    return (np.asarray(correct) == np.asarray(count)).astype(np.float64), None


register_metric(Metric(
    name="exact_match", compute=exact_match, inputs="token_predictions",
    aggregation="mean over examples of 1 (every answer token right) or 0", higher_is_better=True,
    label="exact match", description="every answer token right (teacher-forced arg-max)", unit="%", digits=1,
    scale=100.0, per_example=per_example))
