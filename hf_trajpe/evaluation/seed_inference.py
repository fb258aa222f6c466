"""Inference over training seeds that stays honest with three of them, and corrections for many comparisons.

With ``S`` seeds, how much a result moves from one seed to the next is estimated from ``S`` numbers; a
percentile bootstrap that resamples 3 seeds with replacement sees at most 3 distinct values and makes the
interval too narrow (two equal models come out "significant" 10-15% of the time at 5% nominal, measured
in ``tests/evaluation/test_seed_inference.py``). Here the standard error has two parts:

- seeds: the spread of the per-seed values (paired differences where the two models share seeds, which
  share initial weights and data), ``var / S``, with Student's t on ``S - 1`` degrees of freedom;
- examples: the bootstrap spread of the seed-averaged value over test examples (the same test set is read by
  every seed, so the seed spread does not contain it).

``se = sqrt(seed part + example part)``; the interval is ``value ± t(1 - alpha/2, S - 1) * se`` and the p-value
the two-sided t tail. With one seed there is no seed part and the normal quantile is used (the example
bootstrap is then the whole story, and the report says one seed). :func:`holm` and :func:`benjamini_hochberg`
adjust the p-values of the comparisons one report shows.

**Zero spread is not certainty.** When every seed gives the same value (100/100/100 against 0/0/0), the seed
variance estimated from ``S`` numbers is 0, and t would give ``p = 0`` and an interval of zero width. The seed
variance is then unknown, not zero, so t is not used: the p-value is the exact sign-flip bound over the seeds
(:func:`sign_flip_p`: with all ``S`` per-seed differences of one sign, ``2 / 2^S``, 0.25 at 3 seeds and 0.0625
at 5), the interval is what that exact test cannot reject (the quantity's whole admissible range, ``bounds``,
while ``2 / 2^S >= alpha``; with more seeds the value widened by the example spread), and equivalence is never
concluded (its p-value is 1). One seed with no example spread either: p = 1 and the admissible range.

Student's t is computed here (regularized incomplete beta by continued fraction, quantiles by bisection):
the library does not need scipy at run time; the tests check it against scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["t_sf", "t_ppf", "seed_interval", "sign_flip_p", "tost_p_value", "holm", "benjamini_hochberg",
           "ZERO_SPREAD", "UNBOUNDED"]

#: the ``method`` of an interval from seeds that all agree (module docstring)
ZERO_SPREAD = "exact sign-flip bound"
#: the admissible range of a quantity with no natural bounds
UNBOUNDED = (-math.inf, math.inf)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom (``df = inf``: the normal)."""
    if math.isinf(df):
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (bisection on :func:`t_sf`; ``0 < q < 1``)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile needs 0 < q < 1, got {q}")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    low, high = 0.0, 1.0
    while t_sf(high, df) > 1.0 - q:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_sf(mid, df) > 1.0 - q:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def sign_flip_p(per_seed: Sequence[float], per_seed_other: Sequence[float] | None = None) -> float:
    """The exact two-sided randomization p-value over seeds: paired per-seed differences with their signs
    flipped in every way (``2^S`` assignments), or, with ``per_seed_other``, the two models' seeds relabelled
    in every way; the share of assignments whose mean (difference of means) is at least as far from 0 as the
    observed one. Needs no assumption about the seeds' distribution; its smallest value is ``2 / 2^S``."""
    import itertools

    a = np.asarray(per_seed, dtype=np.float64)
    if per_seed_other is None:
        observed = abs(a.mean())
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=a.size)))
        stats = np.abs((signs * a).mean(1))
    else:
        b = np.asarray(per_seed_other, dtype=np.float64)
        pooled = np.concatenate([a, b])
        observed = abs(a.mean() - b.mean())
        stats = []
        for pick in itertools.combinations(range(pooled.size), a.size):
            mask = np.zeros(pooled.size, dtype=bool)
            mask[list(pick)] = True
            stats.append(abs(pooled[mask].mean() - pooled[~mask].mean()))
        stats = np.asarray(stats)
    tolerance = 1e-12 * max(1.0, observed)
    return float(np.mean(stats >= observed - tolerance))


def _no_spread(values: np.ndarray) -> bool:
    return values.size > 1 and float(np.ptp(values)) <= 1e-12 * max(1.0, float(np.abs(values).max()))


def seed_interval(value: float, per_seed: Sequence[float], example_sd: float, level: float = 0.95,
                  per_seed_other: Sequence[float] | None = None,
                  bounds: tuple[float, float] = UNBOUNDED) -> dict:
    """The interval of ``value`` (a mean over seeds, or a difference of two such means) from its seed and
    example parts (module docstring).

    ``per_seed``: the per-seed values (per-seed differences when the two models are paired by seed); with
    ``per_seed_other`` the two models are unpaired (different seeds): ``per_seed`` is the first model's, and
    Welch's degrees of freedom are used. ``example_sd``: the bootstrap standard deviation of ``value`` over
    test examples. ``bounds``: the values the quantity can take (an accuracy difference: [-1, 1]), the
    interval when the seeds cannot bound it. Returns ``ci``, ``ci_equivalence`` (the ``2 level - 1``
    interval, for two one-sided tests at ``1 - level``), ``p_value``, ``se``, ``df``, ``method`` and
    ``zero_spread`` (every seed the same: the exact bound of the module docstring, never equivalence)."""
    a = np.asarray(per_seed, dtype=np.float64)
    parts = [(a.var(ddof=1) / a.size, a.size - 1)] if a.size > 1 else []
    b = None
    if per_seed_other is not None:
        b = np.asarray(per_seed_other, dtype=np.float64)
        if b.size > 1:
            parts.append((b.var(ddof=1) / b.size, b.size - 1))
    seed_var = sum(v for v, _ in parts)
    se = math.sqrt(seed_var + example_sd ** 2)
    alpha = 1.0 - level
    zero_spread = _no_spread(a) and (b is None or b.size < 2 or _no_spread(b))
    if zero_spread or se == 0.0:
        return _exact_bound(value, a, b, example_sd, se, level, bounds)
    if not parts:
        df, method = math.inf, "one seed: normal interval from the example bootstrap"
    elif len(parts) == 1:
        df = float(parts[0][1])
        method = f"t over {a.size} seeds ({'paired by seed' if per_seed_other is None else 'one model'}) plus examples"
    else:  # Welch-Satterthwaite on the seed parts
        den = sum(v * v / d for v, d in parts if d > 0)
        df = max(1.0, seed_var * seed_var / den) if den > 0 else math.inf
        method = "Welch t over the two models' seeds plus examples"
    half, half_eq = t_ppf(1.0 - alpha / 2.0, df) * se, t_ppf(1.0 - alpha, df) * se
    ci, ci_eq = (value - half, value + half), (value - half_eq, value + half_eq)
    p = min(1.0, 2.0 * t_sf(abs(value) / se, df))
    return {"ci": _within(ci, bounds), "ci_equivalence": _within(ci_eq, bounds), "p_value": float(p), "se": se,
            "df": df, "method": method, "zero_spread": False}


def _within(ci: tuple[float, float], bounds: tuple[float, float]) -> tuple[float, float]:
    return float(max(bounds[0], ci[0])), float(min(bounds[1], ci[1]))


def _exact_bound(value: float, a: np.ndarray, b: np.ndarray | None, example_sd: float, se: float, level: float,
                 bounds: tuple[float, float]) -> dict:
    """Every seed the same (or nothing varies at all): the exact sign-flip bound (module docstring)."""
    alpha = 1.0 - level
    seeds = a.size + (0 if b is None else b.size)
    if abs(value) <= 1e-12 or seeds < 2:
        p = 1.0
    else:
        p = sign_flip_p(a, b)
    z = t_ppf(1.0 - alpha / 2.0, math.inf)
    # every value other than the observed one leaves the seeds all on one side: the smallest p the test can give
    smallest = (sign_flip_p(np.ones(a.size)) if b is None else sign_flip_p(np.ones(a.size), np.zeros(b.size))
                ) if seeds >= 2 else 1.0
    if smallest >= alpha:
        ci = bounds  # the exact test rejects no value: the quantity may be anything it can be
    else:
        ci = _within((value - z * example_sd, value + z * example_sd), bounds)
    n = f"{a.size}" if b is None else f"{a.size} + {b.size}"
    method = (f"{ZERO_SPREAD} over {n} seeds: every seed gave the same value, so the seed variance is unknown "
              "(not zero); p from the sign-flip test, the interval what it cannot reject, never equivalence")
    if seeds < 2:
        method = "one seed and no spread over examples: nothing bounds the value"
    return {"ci": (float(ci[0]), float(ci[1])), "ci_equivalence": (float(bounds[0]), float(bounds[1])),
            "p_value": float(p), "se": se, "df": float(max(seeds - 1, 1)), "method": method, "zero_spread": True}


def tost_p_value(value: float, se: float, df: float, margin: float) -> float:
    """The p-value of two one-sided tests of equivalence within ``±margin`` (the larger of the two one-sided
    p-values of ``difference <= -margin`` and ``difference >= +margin``), from the same ``se`` and ``df`` as
    :func:`seed_interval`: below ``alpha`` exactly when its ``1 - 2 alpha`` interval lies inside the margin."""
    if se == 0.0:
        return 1.0  # no spread measured: nothing shows the difference stays inside the margin
    lower = t_sf((value + margin) / se, df)  # P(T > ...) under difference = -margin
    upper = t_sf((margin - value) / se, df)  # under difference = +margin
    return float(max(lower, upper))


def holm(pvalues: Sequence[float], unseen: int = 0) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error across the comparisons of one report).

    ``unseen``: comparisons of the same family whose p-values are not known (a published report that kept
    too little to recompute them); each is counted at its least favourable p-value, which makes the adjusted
    values an upper bound on what the whole family would give (a difference called with them holds)."""
    p = np.asarray(pvalues, dtype=np.float64)
    order = np.argsort(p)
    adjusted = np.empty_like(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (p.size + unseen - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate)."""
    p = np.asarray(pvalues, dtype=np.float64)
    order = np.argsort(p)[::-1]
    adjusted = np.empty_like(p)
    running = 1.0
    for k, i in enumerate(order):
        rank = p.size - k
        running = min(running, p[i] * p.size / rank)
        adjusted[i] = running
    return adjusted.tolist()
