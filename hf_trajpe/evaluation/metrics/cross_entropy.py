"""Cross-entropy: the mean loss per scored token (nats), the content study's per-type loss."""

from __future__ import annotations

import numpy as np

from .registry import Metric, register_metric

__all__ = ["cross_entropy"]


def cross_entropy(loss_total, token_total):
    """``loss_total / token_total``: summed token losses (nats) over the scored tokens they cover. Arrays are
    taken elementwise (one total per seed, per resample), so the pooling is the caller's sum."""
    return np.divide(loss_total, token_total)


register_metric(Metric(
    name="cross_entropy", compute=cross_entropy, inputs="token_losses",
    aggregation="pooled over the scored tokens: summed loss / scored tokens", higher_is_better=False,
    label="cross-entropy", description="mean negative log-likelihood of the scored tokens", unit="nats", digits=3))
