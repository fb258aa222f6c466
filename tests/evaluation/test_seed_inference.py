"""Inference over three seeds: Student's t against scipy, Holm and Benjamini-Hochberg against worked
examples, and the false-"significant" rate and coverage of the interval the reports use, simulated."""

from __future__ import annotations

import numpy as np
import pytest

from hf_trajpe.evaluation.answers import accuracy_intervals, paired_difference
from hf_trajpe.evaluation.seed_inference import (
    benjamini_hochberg,
    holm,
    seed_interval,
    sign_flip_p,
    t_ppf,
    t_sf,
    tost_p_value,
)
from hf_trajpe.evaluation.verdicts import significance


@pytest.mark.parametrize("df", [1, 2, 3, 7.5, 30, float("inf")])
def test_student_t_matches_scipy(df):
    stats = pytest.importorskip("scipy.stats")
    for t in (-3.0, -0.4, 0.0, 0.7, 2.1, 9.0):
        assert t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-12)
    for q in (0.025, 0.05, 0.5, 0.95, 0.975, 0.999):
        assert t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-7, abs=1e-9)


def test_holm_and_benjamini_hochberg_on_worked_examples():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: 0.04*4/4=0.04, 0.03*4/3=0.04, 0.01*4/2=0.02, 0.005*4/1=0.02
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([0.5]) == [0.5] and holm([0.9, 0.9]) == [1.0, 1.0]


def test_holm_with_unseen_comparisons_bounds_every_completion_of_the_family():
    """Known p-values plus 3 unknown ones: whatever the unknown ones are, Holm over the whole family never
    gives a known comparison a larger adjusted p than the bound, and some completion reaches it."""
    known = [0.004, 0.03, 0.012, 0.2]
    bound = holm(known, unseen=3)
    # worked: sorted 0.004*7, 0.012*6, 0.03*5, 0.2*4 -> 0.028, 0.072, 0.15, 0.8
    assert bound == pytest.approx([0.028, 0.15, 0.072, 0.8])
    rng = np.random.default_rng(0)
    reached = np.zeros(len(known), dtype=bool)
    for _ in range(2000):
        extra = rng.choice([1e-6, 0.005, 0.02, 0.1, 0.5, 1.0], size=3)
        full = holm(known + list(extra))[: len(known)]
        assert all(f <= b + 1e-12 for f, b in zip(full, bound, strict=True))
        reached |= np.isclose(full, bound)
    assert reached.all()
    assert holm(known, unseen=0) == holm(known)


def test_one_seed_falls_back_to_the_example_spread_and_says_so():
    one = seed_interval(0.1, [0.1], example_sd=0.02)
    assert one["df"] == float("inf") and one["method"].startswith("one seed")
    assert one["ci"] == pytest.approx((0.1 - 1.959964 * 0.02, 0.1 + 1.959964 * 0.02), rel=1e-5)
    three = seed_interval(0.1, [0.05, 0.1, 0.15], example_sd=0.0)
    assert three["ci"] == pytest.approx((0.1 - 4.302653 * 0.05 / np.sqrt(3), 0.1 + 4.302653 * 0.05 / np.sqrt(3)),
                                        rel=1e-5)


def _simulate(spread: float, rng: np.random.Generator, seeds: int = 3, n: int = 200, shift: float = 0.0):
    """Two models' [seeds, n] exact-match scores: per-example difficulty, a per-(model, seed) accuracy offset of
    sd ``spread``, Bernoulli outcomes; ``other`` is ``shift`` better in truth."""
    difficulty = rng.uniform(0.2, 0.8, n)

    def model(delta: float) -> np.ndarray:
        offsets = rng.normal(delta, spread, (seeds, 1))
        return (rng.random((seeds, n)) < np.clip(difficulty + offsets, 0, 1)).astype(np.float64)

    return model(0.0), model(shift)


@pytest.mark.parametrize("spread", [0.08, 0.15])
def test_equal_models_are_called_different_at_most_about_5_percent_of_the_time(spread):
    """The percentile bootstrap of three seeds called equal models significantly different 10% (spread 0.08)
    and 15.5% (0.15) of the time; the reports' interval must stay near the nominal 5%."""
    rng = np.random.default_rng(0)
    runs, false, covered = 400, 0, 0
    for k in range(runs):
        base, other = _simulate(spread, rng)
        diff = paired_difference(base, other, n_resamples=200, seed=k)
        false += significance(diff["ci"]) != "no significant difference"
        covered += diff["ci"][0] <= 0.0 <= diff["ci"][1]
    assert false / runs <= 0.07, f"{false}/{runs} equal pairs called different"
    assert covered / runs >= 0.93


def test_the_interval_still_finds_a_real_difference():
    rng = np.random.default_rng(1)
    found = sum(significance(paired_difference(*_simulate(0.02, rng, shift=0.25), n_resamples=200, seed=k)["ci"])
                == "better" for k in range(40))
    assert found >= 30, found  # t on 2 degrees of freedom is wide: three seeds buy little power


def test_both_at_floor_or_ceiling_are_labelled_not_equivalent():
    zeros, ones = np.zeros((3, 50)), np.ones((3, 50))
    assert paired_difference(zeros, zeros)["degenerate"] == "both at floor"
    assert paired_difference(ones, ones)["degenerate"] == "both at ceiling"
    assert "degenerate" not in paired_difference(zeros, ones)


def test_accuracy_intervals_widen_with_the_seed_spread():
    rng = np.random.default_rng(2)
    tight, _ = _simulate(0.0, rng)
    loose, _ = _simulate(0.2, rng)
    a, b = accuracy_intervals(tight, n_resamples=200), accuracy_intervals(loose, n_resamples=200)
    assert a["method"].startswith("t over 3 seeds")
    assert (b["ci"][1] - b["ci"][0]) > (a["ci"][1] - a["ci"][0])


def test_the_sign_flip_bound_on_worked_examples():
    """Paired: 2^S sign patterns, the share at least as far from 0 as the data; all of one sign: 2 / 2^S.
    Unpaired: every relabelling of the pooled seeds; two constant groups of 3: 2 of C(6, 3) = 20."""
    assert sign_flip_p([1.0, 1.0, 1.0]) == pytest.approx(0.25)
    assert sign_flip_p([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 32)
    assert sign_flip_p([1.0, -1.0]) == 1.0
    # [3, 1, -1], |mean| 1: the signs (+,+,+) 1, (+,+,-) 5/3, (+,-,-) 1 and their negations reach it; (+,-,+) 1/3
    # and its negation do not: 6 of 8
    assert sign_flip_p([3.0, 1.0, -1.0]) == pytest.approx(6 / 8)
    assert sign_flip_p([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]) == pytest.approx(0.1)


def test_zero_spread_takes_the_exact_bound_and_widens_to_what_it_cannot_reject():
    three = seed_interval(0.4, [0.4, 0.4, 0.4], example_sd=0.01, bounds=(-1.0, 1.0))
    assert three["zero_spread"] and three["p_value"] == pytest.approx(0.25) and three["ci"] == (-1.0, 1.0)
    assert three["ci_equivalence"] == (-1.0, 1.0)
    # six seeds all alike: the exact bound (2/64) rejects every other value; the examples still spread it
    six = seed_interval(0.4, [0.4] * 6, example_sd=0.01, bounds=(-1.0, 1.0))
    assert six["p_value"] == pytest.approx(2 / 64)
    assert six["ci"] == pytest.approx((0.4 - 1.959964 * 0.01, 0.4 + 1.959964 * 0.01), rel=1e-5)
    unbounded = seed_interval(2.0, [2.0, 2.0, 2.0], example_sd=0.0)
    assert unbounded["ci"] == (-float("inf"), float("inf"))
    assert tost_p_value(0.0, 0.0, 2.0, 2.0) == 1.0
