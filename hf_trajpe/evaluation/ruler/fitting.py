"""Prompts of an exact token length: bisection over the size of what fills them, and needles at depths.

RULER (``scripts/data/synthetic/niah.py``, ``variable_tracking.py``, ``common_words_extraction.py`` of
NVIDIA/RULER) grows the haystack step by step until the prompt no longer fits, then steps back. Here the size
is bisected instead (the same fixed point, fewer tokenizer calls), and the prompt must land within
``TOLERANCE`` of the target: at most ``target`` tokens, at least ``(1 - TOLERANCE) * target``. Tokens are
counted as the model reads them: ``tokenizer(text, add_special_tokens=False)`` (as the passkey prompts of
:mod:`hf_trajpe.evaluation.long_context`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["DEPTHS", "TOLERANCE", "FitError", "encode", "fit_length", "fit_size", "insert_at_depths"]

TOLERANCE = 0.01
#: RULER's needle depths (percent of the haystack): 40 points from 0 to 100
DEPTHS: tuple[int, ...] = tuple(int(d) for d in np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int))


class FitError(ValueError):
    """The target length cannot be reached (too short for the template, or more than the haystack holds)."""


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def fit_length(build: Callable[[int], str], tokenizer, target: int, what: str, start: int = 64,
               limit: Callable[[], int | None] = lambda: None) -> tuple[str, int]:
    """:func:`fit_size`'s text and token count."""
    return fit_size(build, tokenizer, target, what, start, limit)[1:]


def fit_size(build: Callable[[int], str], tokenizer, target: int, what: str, start: int = 64,
             limit: Callable[[], int | None] = lambda: None, strict: bool = True) -> tuple[int, str, int]:
    """The size, text ``build(size)`` of the largest ``size`` whose token count is at most ``target``, and that
    count. ``build`` must grow with ``size``; ``limit()`` is the largest useful size once known (a haystack
    that has run out). Raises :class:`FitError` when the result is not within ``TOLERANCE`` of ``target``
    (``strict=False``: returns it anyway, for a coarse first stage that a finer one completes)."""
    cache: dict[int, tuple[str, int]] = {}

    def count(size: int) -> int:
        if size not in cache:
            text = build(size)
            cache[size] = (text, len(encode(tokenizer, text)))
        return cache[size][1]

    if count(0) > target:
        raise FitError(f"{what}: even at its smallest the prompt has {count(0)} tokens, more than the "
                       f"target {target}; choose a longer length")
    lo, hi = 0, max(1, start)
    while count(hi) <= target:
        cap = limit()
        if cap is not None and hi >= cap:
            break
        lo, hi = hi, hi * 2
    if count(hi) <= target:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) <= target else (lo, mid)
    text, tokens = cache[lo]
    if strict and tokens < (1 - TOLERANCE) * target:
        raise FitError(f"{what}: the prompt reaches only {tokens} of {target} tokens (haystack used up, or one "
                       "step of its size is too coarse for this length); choose a shorter length or another "
                       "haystack")
    return lo, text, tokens


def insert_at_depths(units: Sequence[str], items: Sequence[str], depths: Sequence[float]) -> list[str]:
    """``units`` with ``items[i]`` inserted before unit ``int(len(units) * depths[i])`` (``depths`` in [0, 1];
    RULER's essay placement: ``int(len(document_sents) * (depth / 100))``); items at one place keep their
    order."""
    if len(items) != len(depths):
        raise ValueError(f"{len(items)} items but {len(depths)} depths")
    places = sorted(((int(len(units) * d), k) for k, d in enumerate(depths)))
    out, done = [], 0
    for place, k in places:
        out.extend(units[done:place])
        out.append(items[k])
        done = max(done, place)
    out.extend(units[done:])
    return out
