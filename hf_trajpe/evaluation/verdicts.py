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
example spread, or the exact sign-flip bound where every seed agrees, :mod:`.seed_inference`) and its TOST
p-value are adjusted by the report's declared correction (Holm's step-down method: the chance that any
"better", "worse" or "equivalent" of the report is wrong stays below ``1 - level``; or Benjamini-Hochberg's
false discovery rate) across the report's comparisons, the same correction for both, and the verdicts use
the adjusted ones; the other correction's calls are kept beside them. The intervals shown stay
per-comparison intervals, so an interval may exclude 0 without a "better".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from .seed_inference import benjamini_hochberg, holm, tost_p_value

__all__ = ["BETTER", "CORRECTIONS", "NO_DIFFERENCE", "WORSE", "DEFAULT_MARGIN", "ZERO_TOLERANCE", "correction_name",
           "equivalence_level", "equivalent", "family_method", "judge_family", "plain_verdict", "significance",
           "verdict_text"]

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


#: the corrections a report can declare: key -> (adjusting function, name in words)
CORRECTIONS = {"holm": (holm, "Holm"), "bh": (benjamini_hochberg, "Benjamini-Hochberg")}


def correction_name(correction: str) -> str:
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {sorted(CORRECTIONS)}, got {correction!r}")
    return CORRECTIONS[correction][1]


def family_method(n: int, level: float = 0.95, correction: str = "holm") -> str:
    """The sentence a report states about its verdicts."""
    alpha = 1.0 - level
    name = correction_name(correction)
    other = correction_name("bh" if correction == "holm" else "holm")
    return (f"p-values (Student's t over seeds, paired by seed, plus the spread over test "
            f"examples; the exact sign-flip bound over seeds where every seed gave the same value) adjusted by "
            f"{name}'s method across the {n} comparison{'s' if n != 1 else ''} of this report, the differences and "
            "the equivalence tests alike: better/worse when "
            f"the adjusted p < {alpha:g}, equivalent when the adjusted two-one-sided-tests p < {alpha:g} (never "
            f"from seeds that all agree); {other}'s calls beside them; the "
            f"intervals shown are per comparison ({level:.0%} and {2 * level - 1:.0%}), so one may exclude 0 "
            "without a verdict")


def judge_family(family: Sequence[dict], value_key: str, margin: float, level: float = 0.95, unit: str = "%",
                 scale: float = 1.0, key: Callable[[dict], Hashable] | None = None, unseen: int = 0,
                 correction: str = "holm") -> int:
    """One correction across the comparisons of one report, in place, for the differences and the
    equivalence tests alike. Each dict has its difference under ``value_key``, and ``p_value``, ``se``,
    ``df`` (:func:`~.seed_inference.seed_interval`); ``scale`` turns the difference and ``se`` into the unit of
    ``margin`` (100 for fractions against points). Both Holm's and Benjamini-Hochberg's adjustments are
    computed: ``p_holm``/``p_bh`` (significance), ``p_equivalence`` (raw TOST), ``p_equivalence_holm``/
    ``p_equivalence_bh``, ``significance_holm``/``significance_bh``, ``equivalent_holm``/``equivalent_bh``;
    ``correction`` (declared: ``holm`` or ``bh``) picks the ones behind ``significance``, ``equivalent`` and
    ``verdict``. ``family_size`` is set too. A comparison whose seeds all agree (``zero_spread``) is never
    equivalent (TOST p = 1). A ``degenerate`` comparison (neither model varies) is no test and stays out of the
    family. ``key``: dicts with the same key are the same comparison (shown twice in a report), counted once.
    ``unseen``: comparisons of the family not in ``family`` (:func:`~.seed_inference.holm`), counted in the
    family size (at p = 1). Returns the family size."""
    correction_name(correction)
    alpha = 1.0 - level
    groups: dict[Hashable, list[dict]] = {}
    for i, d in enumerate(family):
        if not d.get("degenerate"):
            groups.setdefault(key(d) if key is not None else i, []).append(d)
    heads = [ds[0] for ds in groups.values()]
    raw = [float(d["p_value"]) for d in heads]
    tost = [1.0 if d.get("zero_spread") else tost_p_value(scale * d[value_key], scale * d["se"], d["df"], margin)
            for d in heads]
    fill = [1.0] * unseen
    p_sig, p_eq = (holm(raw, unseen), holm(tost, unseen)) if heads else ([], [])
    b_sig = benjamini_hochberg(raw + fill)[: len(heads)] if heads else []
    b_eq = benjamini_hochberg(tost + fill)[: len(heads)] if heads else []
    n = len(heads) + unseen

    def call(p: float, value: float) -> str:
        if p < alpha and abs(value) > ZERO_TOLERANCE:
            return BETTER if value > 0 else WORSE
        return NO_DIFFERENCE

    for ds, p, pe, pe_raw, pb, pbe in zip(groups.values(), p_sig, p_eq, tost, b_sig, b_eq, strict=True):
        for d in ds:
            value = scale * d[value_key]
            by = {"holm": (call(p, value), bool(pe < alpha)), "bh": (call(pb, value), bool(pbe < alpha))}
            sig, eq = by[correction]
            d.update(p_holm=p, p_bh=pb, p_equivalence=pe_raw, p_equivalence_holm=pe, p_equivalence_bh=pbe,
                     significance_holm=by["holm"][0], significance_bh=by["bh"][0], equivalent_holm=by["holm"][1],
                     equivalent_bh=by["bh"][1], significance=sig, equivalent=eq, family_size=n,
                     correction=correction, verdict=verdict_text(sig, eq, margin, unit))
    for d in family:
        if d.get("degenerate"):
            d.update(p_holm=None, p_bh=None, significance_bh=NO_DIFFERENCE, significance_holm=NO_DIFFERENCE,
                     p_equivalence=None, p_equivalence_holm=None, p_equivalence_bh=None, equivalent_holm=False,
                     equivalent_bh=False, significance=NO_DIFFERENCE, equivalent=False, family_size=n,
                     correction=correction,
                     verdict=verdict_text(NO_DIFFERENCE, False, margin, unit, d["degenerate"]))
    return n
