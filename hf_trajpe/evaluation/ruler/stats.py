"""Statistics for a few samples per cell: exact binomial intervals, a paired sign test, effective length.

- :func:`clopper_pearson`: the exact (Clopper-Pearson) interval of a binomial proportion, from Beta
  quantiles. :func:`score_interval` applies it to a cell's scores with ``x`` = the sum of the scores: for
  0/1 scores (``string_match_part``, and ``string_match_all`` with one reference) it *is* Clopper-Pearson;
  for fractional ``string_match_all`` scores (several references) it is the same Beta quantiles at a
  fractional ``x``, which is conservative in the variance: a score in [0, 1] with mean ``p`` has variance
  at most ``p (1 - p)``, the binomial's.
- :func:`sign_test`: two methods on the same prompts: the exact two-sided sign test on the prompts where
  they differ (for 0/1 scores this is the exact McNemar test), with the mean paired difference and its
  percentile bootstrap interval over prompts (:func:`hf_trajpe.evaluation.bootstrap.bootstrap_ci`).
- :func:`fisher_exact`: two groups of prompts that are not paired (the same methods on different haystacks): the
  exact two-sided test on a 2x2 table of found and missed (hypergeometric; the tables no more likely than the
  observed one, as scipy's ``fisher_exact``).
- :func:`permutation_test`: two groups of values that are not paired, when a unit (a prompt) carries a mean of
  several correlated outcomes: the two-sided permutation test of the difference in means (exact where the
  relabellings are few enough to list, else a seeded Monte Carlo sample of them).
- :func:`holm`: Holm's step-down adjustment of a family of p-values (family-wise error at the level).
- :func:`effective_length`: RULER's effective length (the longest length whose score passes a threshold),
  with the threshold relative to a reference score instead of RULER's fixed 85.6 (Llama-2-7B at 4K).

The incomplete Beta function is computed here (continued fraction, Numerical Recipes' ``betacf``) so that
scipy stays a test dependency; the tests check it against ``scipy.stats``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..bootstrap import bootstrap_ci

__all__ = ["INTERVAL_METHOD", "beta_cdf", "beta_ppf", "clopper_pearson", "effective_length", "fisher_exact", "holm",
           "permutation_test", "score_interval", "sign_test"]

INTERVAL_METHOD = ("Clopper-Pearson (exact binomial) at x = sum of the scores: exact for 0/1 scores, "
                   "conservative for fractional ones")


def _betacf(x: float, a: float, b: float, iterations: int = 300, eps: float = 1e-15) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, iterations + 1):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete Beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(x, a, b) / a
    return 1.0 - math.exp(log_front) * _betacf(1.0 - x, b, a) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of Beta(a, b), by bisection (to about 1e-12)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if beta_cdf(mid, a, b) < q else (lo, mid)
    return (lo + hi) / 2


def clopper_pearson(successes: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact ``level`` interval of a proportion with ``successes`` out of ``n``."""
    if n < 1 or not 0.0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    alpha = 1.0 - level
    lo = 0.0 if successes == 0 else beta_ppf(alpha / 2, successes, n - successes + 1)
    hi = 1.0 if successes == n else beta_ppf(1 - alpha / 2, successes + 1, n - successes)
    return lo, hi


def score_interval(scores: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The interval of a cell's mean score (:data:`INTERVAL_METHOD`)."""
    return clopper_pearson(float(sum(scores)), len(scores), level)


def sign_test(method: Sequence[float], baseline: Sequence[float], n_resamples: int = 2000, level: float = 0.95,
              seed: int = 0) -> dict:
    """``method`` against ``baseline``, paired prompt by prompt: the mean difference, its bootstrap interval,
    wins, losses, ties and the exact two-sided sign-test p-value (ties dropped)."""
    a, b = np.asarray(method, dtype=float), np.asarray(baseline, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired scores need the same prompts on both sides, got {a.size} and {b.size}")
    diff = a - b
    wins, losses = int((diff > 0).sum()), int((diff < 0).sum())
    n = wins + losses
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n if n else 1.0
    if np.ptp(diff) > 0:
        ci, how = bootstrap_ci(diff, n_resamples=n_resamples, level=level, seed=seed), "bootstrap"
    else:  # every prompt differs alike: a bootstrap would give a zero-width interval, certainty from no spread
        ci, how = exact_difference_bound(float(diff.mean()), a.size, level), "exact bound (no spread)"
    return {"diff": float(diff.mean()), "ci": [float(ci[0]), float(ci[1])], "ci_method": how, "wins": wins,
            "losses": losses, "ties": int(a.size - n), "p_value": min(1.0, 2 * tail), "n": int(a.size)}


def exact_difference_bound(mean: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The interval of a mean paired difference in [-1, 1] from ``n`` prompts that all differ by ``mean``:
    Clopper-Pearson on the differences mapped to [0, 1] (``(d + 1) / 2``, at the fractional count where
    ``mean`` is not +-1), mapped back; conservative as for a cell. 10 wins of 10: [+0.38, +1]; 10 ties:
    [-0.62, +0.62], never the point the bootstrap would give."""
    lo, hi = clopper_pearson(n * (mean + 1.0) / 2.0, n, level)
    return 2.0 * lo - 1.0, 2.0 * hi - 1.0


def fisher_exact(found_a: int, n_a: int, found_b: int, n_b: int) -> float:
    """The two-sided p-value of Fisher's exact test of ``found_a`` of ``n_a`` against ``found_b`` of ``n_b``: the
    probability, with the margins fixed, of the tables no more likely than the observed one."""
    if not (0 <= found_a <= n_a and 0 <= found_b <= n_b) or n_a + n_b == 0:
        raise ValueError(f"counts must lie within their totals, got {found_a}/{n_a} and {found_b}/{n_b}")
    found, n = found_a + found_b, n_a + n_b
    total = math.comb(n, found)

    def prob(k: int) -> float:
        return math.comb(n_a, k) * math.comb(n_b, found - k) / total

    observed = prob(found_a)
    ks = range(max(0, found - n_b), min(n_a, found) + 1)
    return min(1.0, sum(p for p in map(prob, ks) if p <= observed * (1 + 1e-9)))


def permutation_test(a: Sequence[float], b: Sequence[float], n_resamples: int = 20000, seed: int = 0) -> dict:
    """Two-sided permutation test of ``mean(a) - mean(b)``: the share of relabellings of the pooled values whose
    difference is at least as far from 0 as the observed one; every relabelling where there are at most
    ``n_resamples``, else ``n_resamples`` drawn with ``seed`` (counting the observed one: ``(k + 1) / (n + 1)``)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0:
        raise ValueError(f"a permutation test needs values on both sides, got {x.size} and {y.size}")
    pooled, n_a = np.concatenate([x, y]), x.size
    observed = abs(x.mean() - y.mean())
    total = pooled.sum()

    def far(sums: np.ndarray) -> np.ndarray:
        diff = sums / n_a - (total - sums) / y.size
        return np.abs(diff) >= observed - 1e-12

    if math.comb(pooled.size, n_a) <= n_resamples:
        sums = np.array([pooled[list(idx)].sum() for idx in itertools.combinations(range(pooled.size), n_a)])
        p, how = float(far(sums).mean()), "exact"
    else:
        rng = np.random.default_rng(seed)
        sums = np.array([pooled[rng.permutation(pooled.size)[:n_a]].sum() for _ in range(n_resamples)])
        p, how = (int(far(sums).sum()) + 1) / (n_resamples + 1), f"Monte Carlo, {n_resamples} relabellings"
    return {"diff": float(x.mean() - y.mean()), "p_value": min(1.0, p), "method": how}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given: the ``i``-th smallest times ``(m - i)``, made non-decreasing
    along that order and capped at 1. A hypothesis is rejected at family-wise level ``a`` when its adjusted
    p-value is below ``a``."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def effective_length(scores: Mapping[int, float], threshold: float) -> int | None:
    """The longest length ``L`` such that the score at every tested length up to ``L`` is at least
    ``threshold``; None when the shortest length already falls short."""
    best = None
    for length in sorted(scores):
        if scores[length] < threshold:
            break
        best = length
    return best
