"""Plain verdicts: significance from the 95% interval, equivalence (two one-sided tests) from the 90% interval
of the same bootstrap draws; the sequence-level interval agrees with scipy.stats.bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hf_trajpe.evaluation import delta_with_intervals, plain_verdict, significance
from hf_trajpe.evaluation.answers import paired_difference
from hf_trajpe.evaluation.verdicts import equivalent


@pytest.mark.parametrize(("ci", "ci_eq", "expected"), [
    ((-1.0, 1.5), (-0.8, 1.2), "no significant difference; equivalent within ±2%"),
    ((-1.0, 2.5), (-0.8, 2.1), "no significant difference; not shown equivalent within ±2%"),
    ((-3.0, 0.5), (-2.5, 0.2), "no significant difference; not shown equivalent within ±2%"),
    ((0.2, 1.5), (0.3, 1.3), "better, yet equivalent within ±2%"),
    ((0.5, 8.0), (1.0, 7.0), "better"),
    ((-9.0, -3.0), (-8.0, -3.5), "worse"),
    ((-1.9, -0.1), (-1.8, -0.2), "worse, yet equivalent within ±2%"),
])
def test_plain_verdicts(ci, ci_eq, expected):
    assert plain_verdict(ci, ci_eq, 2.0) == expected


def test_equivalence_needs_the_whole_interval_strictly_inside_the_margin():
    assert equivalent((-1.99, 1.99), 2.0) and not equivalent((-2.0, 1.0), 2.0) and not equivalent((0.0, 2.0), 2.0)
    assert significance((0.0, 1.0)) == "no significant difference" and significance((1e-6, 1.0)) == "better"


def test_a_bound_within_floating_point_noise_of_zero_is_not_a_difference():
    """0/1 scores summed in float64 leave bounds like 2.7e-17 where the exact bound is 0."""
    assert significance((2.7e-17, 0.11)) == "no significant difference"
    assert significance((-0.2, -3e-12)) == "no significant difference"
    assert significance((2.7e-17, 0.11), tolerance=0.0) == "better"
    assert plain_verdict((0.0, 0.0), (0.0, 0.0), 2.0, degenerate="both at floor") == (
        "both at floor: no comparison (neither model varies)")


def _pair(noise: float, shift: float, n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    count = np.full(n, 100.0)
    base = rng.uniform(180, 260, size=n)
    return base, count, base - shift * count + rng.normal(0, noise, size=n)


def test_tost_from_the_bootstrap_tells_no_effect_from_cannot_tell():
    tight = delta_with_intervals(*_pair(noise=2.0, shift=0.0)[:2], _pair(2.0, 0.0)[2], _pair(2.0, 0.0)[1],
                                 n_resamples=400)
    assert tight["equivalence_level"] == pytest.approx(0.9)
    assert plain_verdict(tight["ci"], tight["ci_equivalence"], 2.0).endswith("; equivalent within ±2%")
    base, count, enc = _pair(noise=60.0, shift=0.0)
    wide = delta_with_intervals(base, count, enc, count, n_resamples=400)
    assert wide["ci"][0] < 0 < wide["ci"][1]
    assert plain_verdict(wide["ci"], wide["ci_equivalence"], 2.0) == (
        "no significant difference; not shown equivalent within ±2%")


def test_sequence_interval_agrees_with_scipy_bootstrap():
    """One level (test sequences, paired), the same statistic: scipy's percentile bootstrap as a check."""
    base, count, enc = _pair(noise=20.0, shift=0.02)
    ours = delta_with_intervals(base, count, enc, count, n_resamples=3000)

    def delta(b, e, c, axis=-1):
        pb, pe = np.exp(b.sum(axis) / c.sum(axis)), np.exp(e.sum(axis) / c.sum(axis))
        return (pb - pe) / pb * 100

    ref = stats.bootstrap((base, enc, count), delta, paired=True, n_resamples=3000, method="percentile",
                          confidence_level=0.95, rng=np.random.default_rng(1)).confidence_interval
    assert ours["delta_pct"] == pytest.approx(delta(base, enc, count))
    width = ref.high - ref.low
    assert ours["ci_sequences"][0] == pytest.approx(ref.low, abs=0.1 * width)
    assert ours["ci_sequences"][1] == pytest.approx(ref.high, abs=0.1 * width)


def test_accuracy_difference_carries_the_equivalence_interval():
    rng = np.random.default_rng(2)
    base = rng.random((2, 300)) < 0.6
    other = rng.random((2, 300)) < 0.6
    d = paired_difference(base, other, n_resamples=300)
    assert d["ci"][0] <= d["ci_equivalence"][0] <= d["ci_equivalence"][1] <= d["ci"][1]
    same = paired_difference(base[:1], base[:1], n_resamples=100)  # one seed: only examples are resampled
    assert same["ci_equivalence"] == (0.0, 0.0)
