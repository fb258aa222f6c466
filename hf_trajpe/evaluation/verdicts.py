"""Plain verdicts of paired differences: significance and equivalence, one comparison alone or Holm-adjusted
across the comparisons of one report.

A comparison that is not about the seed design's claims (every encoding against a baseline table, a
task's accuracy against the baseline's) gets one of three significance verdicts: ``better``, ``worse`` or
``no significant difference``.

"No significant difference" is not "no effect": an interval can contain 0 and still allow a large
effect. So every verdict also says whether an effect larger than a stated ``margin`` is ruled out, by
two one-sided tests (TOST): the difference is *equivalent within ±margin* at ``alpha = 1 - level``
exactly when the ``1 - 2 alpha`` interval (90% for a 95% verdict) lies inside ``(-margin, +margin)``;
otherwise it is *not shown equivalent*. Margins are in the unit of the difference: percent of relative
perplexity for the content types, accuracy points for the tasks.

One comparison alone (:func:`plain_verdict`): significance from its ``level`` interval. A report showing
many comparisons (:func:`judge_family`): each comparison's raw p-value (Student's t over seeds plus the
example spread, :mod:`.seed_inference`) and its TOST p-value are adjusted by Holm's step-down method
across the report's comparisons, and the verdicts use the adjusted ones: the chance that any "better",
"worse" or "equivalent" of the report is wrong stays below ``1 - level``. The intervals shown stay
per-comparison intervals, so an interval may exclude 0 without a "better".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from .seed_inference import benjamini_hochberg, holm, tost_p_value

__all__ = ["BETTER", "NO_DIFFERENCE", "WORSE", "DEFAULT_MARGIN", "ZERO_TOLERANCE", "equivalence_level", "equivalent",
           "family_method", "judge_family", "plain_verdict", "significance", "verdict_text"]

BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no significant difference"
#: the default equivalence margin: ±2 (% relative perplexity delta, or accuracy points)
DEFAULT_MARGIN = 2.0
#: a bound or a difference closer to 0 than this counts as 0 (in the unit of the difference)
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


def verdict_text(sig: str, eq: bool, margin: float, unit: str = "%", degenerate: str | None = None) -> str:
    """``no significant difference; equivalent within ±2%`` or ``...; not shown equivalent within ±2%``; a
    significant difference inside the margin is ``better, yet equivalent within ±2%`` (real but smaller
    than the margin), otherwise ``better``/``worse``. ``degenerate`` (``both at floor``, ``both at ceiling``):
    neither model varies, so nothing is compared."""
    if degenerate:
        return f"{degenerate}: no comparison (neither model varies)"
    bound = f"±{margin:g}{unit}"
    if sig == NO_DIFFERENCE:
        return f"{sig}; {'equivalent' if eq else 'not shown equivalent'} within {bound}"
    return f"{sig}, yet equivalent within {bound}" if eq else sig


def plain_verdict(ci: tuple[float, float], ci_equivalence: tuple[float, float], margin: float,
                  unit: str = "%", degenerate: str | None = None) -> str:
    """The verdict of one comparison alone, from its intervals (:func:`verdict_text`)."""
    return verdict_text(significance(ci), equivalent(ci_equivalence, margin), margin, unit, degenerate)


def family_method(n: int, level: float = 0.95) -> str:
    """The sentence a report states about its verdicts."""
    alpha = 1.0 - level
    return (f"p-values (Student's t over seeds, paired by seed, plus the spread over test "
            f"examples) adjusted by Holm's method across the {n} comparison{'s' if n != 1 else ''} of this report: "
            "better/worse when "
            f"the adjusted p < {alpha:g}, equivalent when the adjusted two-one-sided-tests p < {alpha:g}; the "
            f"intervals shown are per comparison ({level:.0%} and {2 * level - 1:.0%}), so one may exclude 0 "
            "without a verdict")


def judge_family(family: Sequence[dict], value_key: str, margin: float, level: float = 0.95, unit: str = "%",
                 scale: float = 1.0, key: Callable[[dict], Hashable] | None = None, unseen: int = 0) -> int:
    """Holm across the comparisons of one report, in place. Each dict has its difference under
    ``value_key``, and ``p_value``, ``se``, ``df`` (:func:`~.seed_inference.seed_interval`); ``scale``
    turns the difference and ``se`` into the unit of ``margin`` (100 for fractions against points).
    Sets ``p_holm`` (significance), ``p_equivalence`` and ``p_equivalence_holm`` (TOST), ``significance``,
    ``equivalent``, ``verdict``, ``family_size`` and ``correction``; beside them ``p_bh`` and ``significance_bh``,
    the Benjamini-Hochberg adjusted p and its call at the same level (a false discovery rate: with 3 seeds
    Holm across hundreds of comparisons needs t of about 80, docs/evaluation.md). A ``degenerate`` comparison (neither
    model varies) is no test and stays out of the family. ``key``: dicts with the same key are the same
    comparison (shown twice in a report), counted once. ``unseen``: comparisons of the family not in
    ``family`` (:func:`~.seed_inference.holm`), counted in the family size. Returns the family size."""
    alpha = 1.0 - level
    groups: dict[Hashable, list[dict]] = {}
    for i, d in enumerate(family):
        if not d.get("degenerate"):
            groups.setdefault(key(d) if key is not None else i, []).append(d)
    heads = [ds[0] for ds in groups.values()]
    raw = [float(d["p_value"]) for d in heads]
    tost = [tost_p_value(scale * d[value_key], scale * d["se"], d["df"], margin) for d in heads]
    p_sig, p_eq = (holm(raw, unseen), holm(tost, unseen)) if heads else ([], [])
    p_fdr = benjamini_hochberg(raw + [1.0] * unseen)[: len(heads)] if heads else []
    n = len(heads) + unseen
    for ds, p, pe, pe_raw, pb in zip(groups.values(), p_sig, p_eq, tost, p_fdr, strict=True):
        for d in ds:
            value = scale * d[value_key]
            sig, sig_fdr = NO_DIFFERENCE, NO_DIFFERENCE
            if p < alpha and abs(value) > ZERO_TOLERANCE:
                sig = BETTER if value > 0 else WORSE
            if pb < alpha and abs(value) > ZERO_TOLERANCE:
                sig_fdr = BETTER if value > 0 else WORSE
            d.update(p_holm=p, p_bh=pb, significance_bh=sig_fdr, p_equivalence=pe_raw, p_equivalence_holm=pe,
                     significance=sig, equivalent=bool(pe < alpha), family_size=n, correction="holm",
                     verdict=verdict_text(sig, pe < alpha, margin, unit))
    for d in family:
        if d.get("degenerate"):
            d.update(p_holm=None, p_bh=None, significance_bh=NO_DIFFERENCE, p_equivalence=None,
                     p_equivalence_holm=None, significance=NO_DIFFERENCE, equivalent=False, family_size=n,
                     correction="holm",
                     verdict=verdict_text(NO_DIFFERENCE, False, margin, unit, d["degenerate"]))
    return n
