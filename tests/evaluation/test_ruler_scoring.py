"""RULER's scoring on hand-worked examples, and the statistics: exact intervals against published values and
scipy, the paired sign test, effective length."""

from __future__ import annotations

import pytest

from hf_trajpe.evaluation.ruler.scoring import postprocess_pred, sample_score, string_match_all, string_match_part
from hf_trajpe.evaluation.ruler.stats import (
    beta_cdf,
    clopper_pearson,
    effective_length,
    score_interval,
    sign_test,
)
from hf_trajpe.evaluation.ruler.summary import summarize


def test_string_match_all_is_the_mean_fraction_of_references_found_case_insensitively():
    assert string_match_all(["The numbers are 123 and 456."], [["123", "456", "789"]]) == pytest.approx(2 / 3)
    assert string_match_all(["abcde FGHIJ"], [["ABCDE", "fghij"]]) == 1.0
    # two samples: 1/2 and 0/1 -> 0.25
    assert string_match_all(["x 1", "nothing"], [["1", "2"], ["3"]]) == pytest.approx(0.25)


def test_string_match_part_is_one_when_any_reference_is_found():
    assert string_match_part(["only 456 here"], [["123", "456"]]) == 1.0
    assert string_match_part(["nothing"], [["123", "456"]]) == 0.0
    assert string_match_part(["a 1", "b"], [["1", "2"], ["3"]]) == 0.5


def test_scores_need_matching_predictions_and_references():
    with pytest.raises(ValueError, match="1 predictions but 0 lists of references"):
        string_match_all(["a"], [])
    with pytest.raises(ValueError, match="unknown RULER metric"):
        sample_score("exact", "a", ["a"])


def test_predictions_are_cleaned_as_ruler_cleans_them():
    assert postprocess_pred("  4521\x00 is\tit \n") == "4521\n is\nit"
    assert sample_score("string_match_all", " The value is 9. \x01", ["9"]) == 1.0


def test_the_scores_agree_with_the_harness_copy_of_ruler_on_one_sample():
    utils = pytest.importorskip("lm_eval.tasks.ruler.common_utils")
    for pred, ref in [("A 123 b 456", ["123", "456", "789"]), ("none", ["1"]), ("X", ["x"])]:
        assert string_match_all([pred], [ref]) == utils.string_match_all([pred], [ref])
        assert postprocess_pred(pred + "\x02") == utils.postprocess_pred([pred + "\x02"])[0]
        if len(ref) == 1:  # the harness's string_match_part takes the fraction found, not RULER's any-of
            assert string_match_part([pred], [ref]) == utils.string_match_part([pred], [ref])


@pytest.mark.parametrize(("x", "n", "want"), [(0, 10, (0.0, 0.3085)), (5, 10, (0.1871, 0.8129)),
                                              (10, 10, (0.6915, 1.0)), (1, 4, (0.0063, 0.8059))])
def test_clopper_pearson_against_published_values(x, n, want):
    # 95% exact intervals as tabulated (e.g. Clopper & Pearson 1934; any binomial-CI table)
    lo, hi = clopper_pearson(x, n)
    assert lo == pytest.approx(want[0], abs=1e-4) and hi == pytest.approx(want[1], abs=1e-4)


def test_clopper_pearson_and_the_incomplete_beta_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    for x, n in [(0, 3), (1, 3), (2, 7), (7, 7), (13, 40), (2.5, 5)]:
        lo, hi = clopper_pearson(x, n, level=0.9)
        want_lo = stats.beta.ppf(0.05, x, n - x + 1) if x > 0 else 0.0
        want_hi = stats.beta.ppf(0.95, x + 1, n - x) if x < n else 1.0
        assert lo == pytest.approx(want_lo, abs=1e-9) and hi == pytest.approx(want_hi, abs=1e-9)
    for x, a, b in [(0.3, 2.0, 5.0), (0.9, 0.5, 0.5), (0.01, 30.0, 2.5)]:
        assert beta_cdf(x, a, b) == pytest.approx(stats.beta.cdf(x, a, b), abs=1e-12)


def test_a_cell_interval_covers_its_mean_and_all_ones_is_not_certain():
    lo, hi = score_interval([1.0] * 5)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 5))  # (alpha/2)^(1/n): the exact bound
    lo, hi = score_interval([0.5, 0.75, 1.0])
    assert lo < 0.75 < hi


def test_sign_test_is_exact_and_paired():
    stats = pytest.importorskip("scipy.stats")
    res = sign_test([1, 1, 1, 1, 1, 1, 0, 1], [0, 0, 0, 0, 0, 0, 0, 1], n_resamples=200)
    assert (res["wins"], res["losses"], res["ties"]) == (6, 0, 2)
    assert res["p_value"] == pytest.approx(stats.binomtest(6, 6).pvalue) == pytest.approx(2 / 64)
    assert res["diff"] == pytest.approx(0.75) and res["ci"][0] <= 0.75 <= res["ci"][1]
    even = sign_test([1, 0, 1, 0], [0, 1, 0, 1], n_resamples=200)
    assert even["p_value"] == 1.0 and even["diff"] == 0.0
    with pytest.raises(ValueError, match="same prompts"):
        sign_test([1, 0], [1])


def test_prompts_that_all_differ_alike_give_an_exact_bound_not_a_point():
    """Ten wins of ten (or ten ties) have no spread: a bootstrap would give [+1, +1] ([0, 0]); the bound is
    Clopper-Pearson's on the differences mapped to [0, 1]."""
    wins = sign_test([1] * 10, [0] * 10, n_resamples=200)
    lo, _ = clopper_pearson(10, 10)
    assert wins["ci"] == pytest.approx([2 * lo - 1, 1.0]) and wins["ci_method"].startswith("exact")
    assert 0.37 < wins["ci"][0] < 0.39 and wins["p_value"] == pytest.approx(2 / 1024)
    ties = sign_test([1] * 10, [1] * 10, n_resamples=200)
    assert ties["ci"][0] == pytest.approx(-ties["ci"][1]) and 0.6 < ties["ci"][1] < 0.65
    spread = sign_test([1, 1, 0, 1], [0, 0, 0, 0], n_resamples=200)
    assert spread["ci_method"] == "bootstrap"


def test_effective_length_is_the_longest_length_before_the_first_failure():
    assert effective_length({4096: 0.9, 8192: 0.8, 16384: 0.5, 32768: 0.85}, 0.75) == 8192
    assert effective_length({4096: 0.5}, 0.75) is None


def _rows(method, scores_by_length):
    return [{"method": method, "task": "t", "haystack": "noise", "length": L, "index": i, "score": s}
            for L, scores in scores_by_length.items() for i, s in enumerate(scores)]


def test_summary_threshold_is_relative_to_the_baseline_at_the_reference_length():
    rows = _rows("stock", {1024: [1, 1, 1, 1], 2048: [1, 1, 0, 0]}) + _rows("yarn", {1024: [1, 1, 1, 1],
                                                                                      2048: [1, 1, 1, 0]})
    s = summarize({"meta": {"methods": ["stock", "yarn"]}, "rows": rows}, ratio=0.7, n_resamples=200)
    eff = s["effective_length"]
    assert eff["reference_length"] == 1024 and eff["threshold"] == pytest.approx(0.7)
    assert eff["methods"] == {"stock": {"length": 1024}, "yarn": {"length": 2048}}
    at_2048 = next(c for c in s["comparisons"] if c["length"] == 2048)
    assert (at_2048["wins"], at_2048["losses"], at_2048["ties"]) == (1, 0, 3) and at_2048["diff"] == 0.25
    with pytest.raises(ValueError, match="reference length 4096 was not run"):
        summarize({"meta": {"methods": ["stock"]}, "rows": rows}, reference_length=4096)
