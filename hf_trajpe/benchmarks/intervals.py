"""How sure a time ratio is: a bootstrap interval over paired rounds, and a verdict against a limit.

Each paired round gives one ratio (patched seconds / the stock seconds measured right next to it).
The point estimate is the median of these ratios; the 95% interval is a percentile bootstrap of that
median (the rounds resampled with replacement, a fixed seed, so the same timings give the same
interval). Against a limit the verdict is

- ``met``: the whole interval is within the limit (its upper end <= limit);
- ``missed``: the whole interval is above the limit (its lower end > limit);
- ``unresolved``: the interval straddles the limit, or there are fewer than :data:`MIN_ROUNDS`
  rounds (with 4 rounds a "95%" bootstrap interval of a median covers the truth only about 87-90% of
  the time; from 6 rounds on, 91-96% in simulations with normal and heavy-tailed noise).

A target that is unresolved although its point lies more than :data:`DECIDE_MARGIN` (2%) from the limit is
:func:`undecided`: more rounds would decide it, and the benchmarks add them (timing.side_by_side, within a
budget). Closer than that, an unresolved verdict is the honest answer of a noisy machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["CONFIDENCE", "DECIDE_MARGIN", "HALF_WIDTH", "MIN_ROUNDS", "VERDICTS", "paired_interval",
           "relative_half_width", "undecided", "verdict"]

#: two-sided confidence of the intervals
CONFIDENCE = 0.95
#: the adaptive rounds stop once every interval is this narrow: (high - low) / 2 / point
HALF_WIDTH = 0.02
#: fewer paired rounds than this never give a verdict other than "unresolved"
MIN_ROUNDS = 6
#: bootstrap resamples (the medians of 4,000 resamples of up to ~100 rounds take a few milliseconds)
RESAMPLES = 4000
VERDICTS = ("met", "missed", "unresolved")
#: an unresolved target whose point is farther than this from its limit (relative) gets more rounds
DECIDE_MARGIN = 0.02


def paired_interval(ratios: Sequence[float], confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                    seed: int = 0) -> dict[str, float | int]:
    """``{"point", "low", "high", "rounds"}`` for the median of ``ratios`` (one per paired round).

    One round gives a zero-width interval (and :func:`verdict` calls it unresolved)."""
    x = np.asarray(ratios, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"need a non-empty 1-d sequence of paired ratios, got shape {x.shape}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("paired ratios must be finite and positive")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    point = float(np.median(x))
    if x.size == 1:
        return {"point": point, "low": point, "high": point, "rounds": 1}
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(medians, [tail, 1 - tail])
    return {"point": point, "low": float(low), "high": float(high), "rounds": int(x.size)}


def relative_half_width(interval: dict) -> float:
    """Half the interval's width relative to its point: 0.02 means the point +-2%."""
    return (interval["high"] - interval["low"]) / 2 / interval["point"]


def verdict(interval: dict, limit: float, min_rounds: int = MIN_ROUNDS) -> str:
    """``met`` / ``missed`` / ``unresolved`` for "the ratio is at most ``limit``" (module docstring)."""
    if interval["rounds"] < min_rounds:
        return "unresolved"
    if interval["high"] <= limit:
        return "met"
    if interval["low"] > limit:
        return "missed"
    return "unresolved"


def undecided(interval: dict, limit: float, margin: float = DECIDE_MARGIN, min_rounds: int = MIN_ROUNDS) -> bool:
    """Whether the target "at most ``limit``" is unresolved although its point is more than ``margin``
    (relative) from the limit: the case more rounds should decide."""
    return verdict(interval, limit, min_rounds) == "unresolved" and abs(interval["point"] / limit - 1) > margin
