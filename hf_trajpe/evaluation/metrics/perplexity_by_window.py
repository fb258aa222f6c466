"""Perplexity by window of position: the loss of long documents pooled in windows of position relative to the
trained length ``T`` (inside it, 1-1.5x, 1.5-2x, ...): where a model stops reading past ``T``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .cross_entropy import cross_entropy
from .registry import Metric, register_metric

__all__ = ["WINDOW_EDGES", "WindowLoss", "perplexity_by_window", "windows"]

#: window edges in multiples of the trained length
WINDOW_EDGES = (0.0, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)


@dataclass
class WindowLoss:
    """One window ``[start, stop)`` (tokens; ``low``/``high`` in trained lengths): each document's summed loss
    there (``sums``, ``[D]``) and its token count (``counts``), and their pooled perplexity ``ppl``."""

    low: float
    high: float
    start: int
    stop: int
    sums: np.ndarray
    counts: np.ndarray
    ppl: float


def windows(length: int, trained: int, edges: Sequence[float]) -> list[tuple[float, float, int, int]]:
    """``(low, high, start, stop)`` of every window up to ``length`` tokens; the last one cut at ``length``."""
    out = []
    for low, high in zip(edges, edges[1:], strict=False):
        start, stop = int(round(low * trained)), min(int(round(high * trained)), length)
        if start >= length:
            break
        out.append((low, high if stop == int(round(high * trained)) else stop / trained, start, stop))
    return out


def perplexity_by_window(nlls: Sequence, trained: int, edges: Sequence[float] = WINDOW_EDGES) -> list[WindowLoss]:
    """``nlls``: the loss of each next token of each document (``[n - 1]``: position ``i`` is the token at
    ``i + 1``), all cut to the shortest; per window, ``exp`` of the mean loss of its tokens pooled over the
    documents (``math.exp``: the published long-context numbers were made with it)."""
    if not nlls:
        raise ValueError("no documents to evaluate")
    length = min(int(n.numel()) for n in nlls) + 1
    out = []
    for low, high, start, stop in windows(length, trained, edges):
        lo, hi = max(start - 1, 0), stop - 1  # loss index of the tokens at positions start..stop-1
        sums = np.array([float(n[lo:hi].sum()) for n in nlls])
        counts = np.array([hi - lo] * len(nlls), dtype=float)
        out.append(WindowLoss(low, high, start, stop, sums, counts,
                              math.exp(float(cross_entropy(sums.sum(), counts.sum())))))
    return out


register_metric(Metric(
    name="perplexity_by_window", compute=perplexity_by_window, inputs="token_losses",
    aggregation="per window of position: exp(summed loss of its tokens over every document / its tokens)",
    higher_is_better=False, label="perplexity by window",
    description="perplexity of the tokens in each window of position, in multiples of the trained length",
    digits=2))
