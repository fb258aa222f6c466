"""Passkey retrieval: right when the first five digits a model generates are the five-digit key it was shown
(the prompt of the landmark-attention and YaRN papers)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .registry import Metric, register_metric

__all__ = ["passkey_retrieval", "per_example"]


def per_example(predictions: Sequence[str], references: Sequence[str]) -> tuple[np.ndarray, None]:
    """1.0 where the digits of the generated text, the first five, are the key; else 0.0."""
    if len(predictions) != len(references):
        raise ValueError(f"passkey_retrieval: {len(predictions)} answers for {len(references)} keys; give one each")
    return np.array([float(re.sub(r"\D", "", p)[:5] == key) for p, key in zip(predictions, references,
                                                                             strict=True)]), None


def passkey_retrieval(predictions: Sequence[str], references: Sequence[str]) -> float:
    """The share of generated answers (``predictions``) that give their key (``references``)."""
    if not predictions:
        raise ValueError("passkey_retrieval: no answers to score")
    hits, _ = per_example(predictions, references)
    return float(hits.mean())


register_metric(Metric(
    name="passkey_retrieval", compute=passkey_retrieval, inputs="generated_text",
    aggregation="mean over trials of 1 (the first five digits generated are the key) or 0", higher_is_better=True,
    label="passkey retrieval", description="greedy answer's first five digits equal the hidden five-digit key",
    unit="%", digits=0, scale=100.0, per_example=per_example))
