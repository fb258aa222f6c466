"""Answer-token accuracy: token accuracy on the answer tokens of tasks with known answers (teacher forcing)."""

from __future__ import annotations

import numpy as np

from .registry import Metric, register_metric
from .token_accuracy import token_accuracy

__all__ = ["answer_token_accuracy", "per_example"]


def answer_token_accuracy(correct, count) -> float:
    """``correct``, ``count``: ``[N]`` right answer tokens and answer tokens of each example; the pooled share
    right (an example with more answer tokens weighs more)."""
    return token_accuracy(np.sum(correct), np.sum(count))


def per_example(correct, count) -> tuple[np.ndarray, np.ndarray]:
    """Each example's share of answer tokens right, weighted by its answer tokens: the weighted mean is
    :func:`answer_token_accuracy`."""
    return np.asarray(correct) / np.asarray(count), np.asarray(count).astype(np.float64)


register_metric(Metric(
    name="answer_token_accuracy", compute=answer_token_accuracy, inputs="token_predictions",
    aggregation="pooled over the answer tokens of every example: right answer tokens / answer tokens",
    higher_is_better=True, label="answer-token accuracy", description="answer tokens right / answer tokens",
    unit="%", digits=1, scale=100.0, per_example=per_example))
