"""Plain verdicts of a paired difference: significance from the 95% interval, equivalence from the 90% one.

A comparison that is not about the seed design's claims (every encoding against a baseline table, a
task's accuracy against the baseline's) gets one of three significance verdicts from its ``level``
interval ``[lo, hi]``: ``better`` (``lo > 0``), ``worse`` (``hi < 0``) or ``no significant difference``.

"No significant difference" is not "no effect": an interval can contain 0 and still allow a large
effect. So every verdict also says whether an effect larger than a stated ``margin`` is ruled out, by
two one-sided tests (TOST): the difference is *equivalent within ±margin* at ``alpha = 1 - level``
exactly when the ``1 - 2 alpha`` interval (90% for a 95% verdict, from the same bootstrap draws) lies
inside ``(-margin, +margin)``; otherwise it is *not shown equivalent*. Margins are in the unit of the
difference: percent of relative perplexity for the content types, accuracy points for the tasks.
"""

from __future__ import annotations

__all__ = ["BETTER", "NO_DIFFERENCE", "WORSE", "DEFAULT_MARGIN", "ZERO_TOLERANCE", "equivalence_level", "equivalent",
           "plain_verdict", "significance"]

BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no significant difference"
#: the default equivalence margin: ±2 (% relative perplexity delta, or accuracy points)
DEFAULT_MARGIN = 2.0
#: a bound closer to 0 than this counts as touching 0 (in the unit of the difference)
ZERO_TOLERANCE = 1e-9


def equivalence_level(level: float) -> float:
    """The two-sided level whose interval decides TOST at ``alpha = 1 - level``: ``1 - 2 alpha``."""
    return 2.0 * level - 1.0


def significance(ci: tuple[float, float], tolerance: float = ZERO_TOLERANCE) -> str:
    """``better`` when the interval lies above ``tolerance``, ``worse`` below ``-tolerance``: a bound within
    floating-point noise of 0 (a lower bound of 2.7e-17 from summing 0/1 scores) is not a difference."""
    lo, hi = ci
    if lo > tolerance:
        return BETTER
    if hi < -tolerance:
        return WORSE
    return NO_DIFFERENCE


def equivalent(ci_equivalence: tuple[float, float], margin: float) -> bool:
    """TOST: both one-sided nulls (difference <= -margin, difference >= +margin) rejected."""
    lo, hi = ci_equivalence
    return -margin < lo and hi < margin


def plain_verdict(ci: tuple[float, float], ci_equivalence: tuple[float, float], margin: float,
                  unit: str = "%", degenerate: str | None = None) -> str:
    """The significance verdict with its equivalence bound: ``no significant difference; equivalent within
    ±2%`` or ``...; not shown equivalent within ±2%``; a significant difference inside the margin is
    ``better, yet equivalent within ±2%`` (real but smaller than the margin), otherwise ``better``/``worse``.
    ``degenerate`` (``both at floor``, ``both at ceiling``): neither model varies, so nothing is compared."""
    if degenerate:
        return f"{degenerate}: no comparison (neither model varies)"
    sig, eq = significance(ci), equivalent(ci_equivalence, margin)
    bound = f"±{margin:g}{unit}"
    if sig == NO_DIFFERENCE:
        return f"{sig}; {'equivalent' if eq else 'not shown equivalent'} within {bound}"
    return f"{sig}, yet equivalent within {bound}" if eq else sig
