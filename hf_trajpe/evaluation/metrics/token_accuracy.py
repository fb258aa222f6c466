"""Token accuracy: the share of scored tokens whose arg-max prediction is the reference token."""

from __future__ import annotations

import numpy as np

from .registry import Metric, register_metric

__all__ = ["token_accuracy"]


def token_accuracy(correct_total, token_total):
    """``correct_total / token_total``: right tokens over scored tokens, elementwise for arrays of totals."""
    return np.divide(correct_total, token_total)


register_metric(Metric(
    name="token_accuracy", compute=token_accuracy, inputs="token_predictions",
    aggregation="pooled over the scored tokens: right tokens / scored tokens", higher_is_better=True,
    label="token accuracy", description="arg-max prediction equals the gold token (next token, or masked token)",
    digits=3))
