"""Plain verdicts: significance from the 95% interval, equivalence (two one-sided tests) from the 90% one; the
sequence-level interval agrees with scipy.stats.bootstrap; hand-computed t intervals and p-values; Holm across
the comparisons of a report decides its verdicts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hf_trajpe.evaluation import delta_with_intervals, plain_verdict, significance
from hf_trajpe.evaluation.answers import accuracy_intervals, paired_difference
from hf_trajpe.evaluation.verdicts import equivalent, judge_family


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


def test_three_seeds_of_a_hand_made_data_set_give_the_t_interval_computed_by_hand():
    """Four examples, three seeds; the baseline gets none right, the other model seed 0 all four, seed 1 the
    first three, seed 2 the last one: every example is right in two of three seeds, so resampling examples
    changes nothing and the seeds are the whole spread. By hand: per-seed differences 1, 0.75, 0.25, mean 2/3,
    se = sd / sqrt(3) = 0.220479, t(0.975, 2) = 4.302653, t(0.95, 2) = 2.919986, p = 2 P(T_2 > 3.0237) =
    0.094178 (scipy.stats.t). The percentile bootstrap of the three seeds, [0.25, 1.0], excluded 0."""
    base = np.zeros((3, 4))
    other = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 1]], dtype=float)
    d = paired_difference(base, other, n_resamples=300)
    assert d["difference"] == pytest.approx(2 / 3) and d["ci_examples"] == pytest.approx((2 / 3, 2 / 3))
    # [2/3 - 0.948646, 2/3 + 0.948646] and [2/3 - 0.643796, 2/3 + 0.643796], cut at +1: no difference exceeds it
    assert d["ci"] == pytest.approx((2 / 3 - 0.948646, 1.0), abs=1e-5)
    assert d["ci_equivalence"] == pytest.approx((2 / 3 - 0.643796, 1.0), abs=1e-5)
    assert d["p_value"] == pytest.approx(0.0941784, abs=1e-6) and d["se"] == pytest.approx(0.2204793, abs=1e-6)
    assert significance(tuple(100 * x for x in d["ci"])) == "no significant difference"
    acc = accuracy_intervals(other, n_resamples=300)
    assert acc["ci_seeds"] == (0.25, 1.0) and acc["ci"] == (0.0, 1.0)  # the same t interval, cut to [0, 1]
    # one seed whose four examples all agree: nothing varies, so nothing bounds the difference (not p = 0)
    same = paired_difference(base[:1], other[:1], n_resamples=100)
    assert same["ci"] == (-1.0, 1.0) and same["p_value"] == 1.0 and same["zero_spread"]


def test_token_accuracy_weights_each_example_by_its_answer_tokens():
    """Token accuracy is answer tokens right / answer tokens: 1 + 1 + 0 + 4 of 1 + 2 + 3 + 4 = 0.6, not the mean
    of the per-example fractions (0.625)."""
    count = np.array([1.0, 2.0, 3.0, 4.0])
    fractions = np.array([[1, 1, 0, 4]]) / count
    acc = accuracy_intervals(fractions, n_resamples=200, weights=count)
    assert acc["mean"] == pytest.approx(0.6) and acc["per_seed"] == pytest.approx([0.6])
    d = paired_difference(np.zeros((1, 4)), fractions, n_resamples=200, weights=count)
    assert d["difference"] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="one positive weight per example"):
        accuracy_intervals(fractions, weights=[1.0, 2.0])


def _comparison(value: float, p: float, se: float = 0.5, df: float = 2.0) -> dict:
    return {"difference": value, "p_value": p, "se": se, "df": df, "ci": (value - 3 * se, value + 3 * se)}


def test_holm_across_a_report_takes_better_from_a_raw_p_below_5_percent():
    """Three comparisons with raw p 0.02, 0.03 and 0.04: each alone is significant; Holm across the three
    gives 0.06, 0.06 and 0.06, so the report says better for none of them."""
    family = [_comparison(2.0, 0.02), _comparison(1.5, 0.03), _comparison(1.2, 0.04)]
    assert judge_family(family, "difference", margin=2.0) == 3
    assert [d["p_holm"] for d in family] == pytest.approx([0.06, 0.06, 0.06])
    assert all(d["significance"] == "no significant difference" and d["family_size"] == 3 for d in family)
    assert family[0]["verdict"] == "no significant difference; not shown equivalent within ±2%"
    alone = [_comparison(2.0, 0.02)]
    judge_family(alone, "difference", margin=2.0)
    assert alone[0]["significance"] == "better" and alone[0]["p_holm"] == pytest.approx(0.02)


def test_equivalence_is_two_one_sided_t_tests_adjusted_like_the_differences():
    """0.1 points, se 0.5, 2 degrees of freedom, margin 2: TOST p = P(T_2 > 3.8) = 0.031400 (scipy.stats.t),
    equivalent alone; two such comparisons: Holm 0.0628 each, equivalent neither."""
    one = [_comparison(0.1, 0.9)]
    judge_family(one, "difference", margin=2.0, unit=" points")
    assert one[0]["p_equivalence"] == pytest.approx(0.0313996, abs=1e-6) and one[0]["equivalent"]
    assert one[0]["verdict"] == "no significant difference; equivalent within ±2 points"
    two = [_comparison(0.1, 0.9), _comparison(-0.1, 0.9)]
    judge_family(two, "difference", margin=2.0, unit=" points")
    assert [d["p_equivalence_holm"] for d in two] == pytest.approx([0.0627991, 0.0627991], abs=1e-6)
    assert not any(d["equivalent"] for d in two)


def test_a_difference_within_floating_point_noise_of_zero_is_never_better():
    """0/1 scores summed in float64 leave differences like 2.7e-17 where the exact one is 0: the tolerance keeps
    a small p-value from calling it a difference."""
    family = [_comparison(2.7e-17, 0.001), _comparison(0.3, 0.001)]
    judge_family(family, "difference", margin=2.0)
    assert family[0]["significance"] == "no significant difference"
    assert family[1]["significance"] == "better"


def test_seeds_that_all_agree_give_neither_certainty_nor_equivalence():
    """100/100/100 against 0/0/0: t would say se = 0, p = 0 and the interval [+100, +100]; the seed variance is
    unknown, not zero, so the exact sign-flip bound is used (2 / 2^3 = 0.25) and the interval is what it cannot
    reject: every difference accuracies can have. A difference of 0 with no spread is not "equivalent"."""
    zeros, ones = np.zeros((3, 50)), np.ones((3, 50))
    d = paired_difference(zeros, ones, n_resamples=100)
    assert d["zero_spread"] and d["p_value"] == pytest.approx(0.25) and d["ci"] == (-1.0, 1.0)
    assert d["method"].startswith("exact sign-flip bound over 3 seeds")
    judge_family([d], "difference", margin=2.0, unit=" points", scale=100.0)
    assert d["significance"] == "no significant difference" and not d["equivalent"]
    assert d["p_equivalence"] == 1.0
    same = paired_difference(np.tile([[1.0, 0.0]], (3, 25)), np.tile([[1.0, 0.0]], (3, 25)), n_resamples=100)
    judge_family([same], "difference", margin=2.0, unit=" points", scale=100.0)
    assert same["zero_spread"] and same["difference"] == 0.0 and not same["equivalent"]
    assert same["verdict"] == "no significant difference; not shown equivalent within ±2 points"


def test_a_zero_variance_comparison_handed_in_is_never_equivalent():
    family = [_comparison(0.0, 1.0, se=0.0)]
    judge_family(family, "difference", margin=2.0)
    assert not family[0]["equivalent"] and family[0]["p_equivalence"] == 1.0


def test_the_declared_correction_decides_and_the_other_is_kept_beside():
    """Raw p 0.01, 0.02, 0.03, 0.04: Holm gives 0.04, 0.06, 0.06, 0.06 (one call); Benjamini-Hochberg 0.04 for
    all four (four calls). Declared bh: the verdicts are BH's, Holm's beside them."""
    def family():
        return [_comparison(v, p) for v, p in ((2.0, 0.01), (1.5, 0.02), (1.2, 0.03), (1.1, 0.04))]

    holm_first = family()
    judge_family(holm_first, "difference", margin=2.0)
    assert [d["significance"] for d in holm_first] == ["better"] + ["no significant difference"] * 3
    assert all(d["significance_bh"] == "better" for d in holm_first)
    bh_first = family()
    judge_family(bh_first, "difference", margin=2.0, correction="bh")
    assert all(d["significance"] == "better" and d["correction"] == "bh" for d in bh_first)
    assert [d["significance_holm"] for d in bh_first] == ["better"] + ["no significant difference"] * 3
    assert bh_first[0]["p_equivalence_bh"] >= bh_first[0]["p_equivalence"]
    with pytest.raises(ValueError, match="correction must be one of"):
        judge_family(family(), "difference", margin=2.0, correction="bonferroni")


def test_both_at_floor_is_no_test_and_leaves_the_family():
    family = [{**_comparison(0.0, 1.0, se=0.0), "degenerate": "both at floor"}, _comparison(1.0, 0.02)]
    assert judge_family(family, "difference", margin=2.0) == 1
    assert family[0]["verdict"] == "both at floor: no comparison (neither model varies)"
    assert family[0]["p_holm"] is None and not family[0]["equivalent"]
    assert family[1]["p_holm"] == pytest.approx(0.02) and family[1]["significance"] == "better"


def test_an_interval_of_accuracies_stays_inside_what_accuracies_can_be():
    """Two seeds at 0% and 100%: t on one degree of freedom reaches far past both ends; the reported interval
    stops at 0 and 1 (differences at -1 and +1), the p-value is untouched."""
    split = np.stack([np.zeros(20), np.ones(20)])
    acc = accuracy_intervals(split, n_resamples=100)
    assert acc["ci"] == (0.0, 1.0)
    d = paired_difference(np.zeros((2, 20)), split[::-1], n_resamples=100)
    assert d["ci"] == (-1.0, 1.0) and 0.4 < d["p_value"] < 1.0
