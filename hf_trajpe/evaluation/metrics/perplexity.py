"""Perplexity: ``exp`` of the cross-entropy, pooled over the scored tokens (the content study's headline)."""

from __future__ import annotations

import numpy as np

from .cross_entropy import cross_entropy
from .registry import Metric, register_metric

__all__ = ["perplexity"]


def perplexity(loss_total, token_total):
    """``exp(loss_total / token_total)`` (``np.exp``), elementwise for arrays of totals (per seed, per
    resample): a unit's perplexity pools its tokens, it is not a mean of per-sequence perplexities."""
    return np.exp(cross_entropy(loss_total, token_total))


register_metric(Metric(
    name="perplexity", compute=perplexity, inputs="token_losses",
    aggregation="exp of the pooled mean token loss: exp(summed loss / scored tokens)", higher_is_better=False,
    label="perplexity", description="exp(cross-entropy): the effective number of equally likely next tokens",
    digits=2))
