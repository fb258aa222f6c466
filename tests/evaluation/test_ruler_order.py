"""The RULER order analysis: cells with exact intervals, retention against the reference length, the declared
comparisons with Holm's adjustment (checked against a direct computation and scipy), and the verdicts."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from hf_trajpe.evaluation.ruler.order import OrderPlan, analyse
from hf_trajpe.evaluation.ruler.stats import fisher_exact, holm, permutation_test

PLAN = OrderPlan(baseline="stock", extensions=("good", "same", "half"), reference_length=8, main_length=16,
                 later_lengths=(32,), leading=2)


def _rows(method: str, length: int, found: list[int], task: str = "niah_single_1", haystack: str = "noise") -> list:
    return [{"method": method, "task": task, "haystack": haystack, "length": length, "index": i, "score": float(s)}
            for i, s in enumerate(found)]


def _table() -> list[dict]:
    n = 30
    rows = []
    for hay in ("noise", "real_code"):
        rows += _rows("stock", 8, [1] * n, haystack=hay) + _rows("stock", 16, [0] * n, haystack=hay)
        rows += _rows("good", 8, [1] * n, haystack=hay) + _rows("good", 16, [1] * 27 + [0] * 3, haystack=hay)
        rows += _rows("same", 8, [1] * n, haystack=hay) + _rows("same", 16, [0] * n, haystack=hay)
        rows += _rows("half", 8, [1] * 20 + [0] * 10, haystack=hay)
        rows += _rows("half", 16, ([1, 0] * 15) if hay == "noise" else [0] * n, haystack=hay)
    rows += _rows("other", 16, [1] * n)  # not in the plan: left out
    return rows


def test_the_verdicts_follow_the_holm_adjusted_paired_tests():
    result = analyse(_table(), PLAN)
    primary = {(c["a"], c["b"]): c for c in result["primary"]}
    assert set(primary) == {("good", "stock"), ("same", "stock"), ("half", "stock"), ("real text", "generated text")}
    good = primary[("good", "stock")]
    assert (good["n"], good["wins"], good["losses"], good["ties"]) == (60, 54, 0, 6)
    assert good["p_value"] == pytest.approx(scipy.stats.binomtest(54, 54).pvalue)
    assert good["verdict"] == "good orders above stock"
    assert primary[("same", "stock")]["verdict"] == "the data cannot resolve them"
    p = [c["p_value"] for c in result["primary"]]
    assert [c["p_holm"] for c in result["primary"]] == pytest.approx(holm(p))
    # the content comparison: one value per prompt (the share of the three extensions that found it), real haystack
    # prompts against generated ones, unpaired
    content = primary[("real text", "generated text")]
    real = [1 / 3] * 27 + [0.0] * 3
    noise = [2 / 3 if i % 2 == 0 else 1 / 3 for i in range(27)] + [1 / 3 if i % 2 == 0 else 0.0 for i in range(27, 30)]
    assert (content["n_a"], content["n_b"]) == (30, 30)
    assert content["mean_a"] == pytest.approx(sum(real) / 30) and content["mean_b"] == pytest.approx(sum(noise) / 30)
    assert content["p_value"] == pytest.approx(permutation_test(real, noise)["p_value"])
    assert content["per_haystack"]["noise"] == {"found": 27 + 0 + 15, "n": 90, "prompts": 30}


def test_cells_retention_and_the_leading_methods():
    result = analyse(_table(), PLAN)
    cell = next(c for c in result["cells"] if (c["method"], c["length"], c["haystack"]) == ("half", 16, "noise"))
    assert cell["n"] == 30 and cell["mean"] == 0.5
    assert cell["ci"] == pytest.approx(list(scipy.stats.binomtest(15, 30).proportion_ci(method="exact")))
    retention = {(r["method"], r["length"]): r for r in result["retention"]}
    assert retention[("good", 16)]["retention"] == pytest.approx(0.9)
    assert retention[("half", 16)]["retention"] == pytest.approx((15 / 60) / (40 / 60))
    assert retention[("half", 16)]["n"] == 60
    assert not any(r["method"] == "other" for r in result["pooled"])
    assert result["leading"][16] == ["good", "half"]
    assert {(c["a"], c["b"]) for c in result["secondary"] if c["length"] == 16} == {("good", "half")}
    assert result["secondary"][0]["p_holm"] == pytest.approx(result["secondary"][0]["p_value"])  # 32: no rows


def test_fisher_and_holm_match_their_definitions():
    for table in [(3, 10, 8, 10), (0, 5, 5, 5), (12, 30, 54, 70), (1, 1, 0, 1), (0, 4, 0, 6)]:
        a, n_a, b, n_b = table
        want = scipy.stats.fisher_exact([[a, n_a - a], [b, n_b - b]]).pvalue
        assert fisher_exact(*table) == pytest.approx(want, rel=1e-9)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == [1.0, 1.0]
    a, b = [1, 0.5, 1, 1, 0.8], [0, 0.2, 0.5, 0, 0.1, 0.3]  # few enough relabellings to list them all
    want = scipy.stats.permutation_test((a, b), lambda x, y: abs(np.mean(x) - np.mean(y)), n_resamples=np.inf,
                                        permutation_type="independent", alternative="greater").pvalue
    assert permutation_test(a, b) == {"diff": pytest.approx(0.6766667), "p_value": pytest.approx(want),
                                      "method": "exact"}
    rng = np.random.default_rng(1)
    a, b = rng.random(40), rng.random(50) + 0.1
    got = permutation_test(a, b, n_resamples=4000)
    want = scipy.stats.permutation_test((a, b), lambda x, y: abs(np.mean(x) - np.mean(y)), n_resamples=4000,
                                        permutation_type="independent", alternative="greater", random_state=0).pvalue
    assert got["method"] == "Monte Carlo, 4000 relabellings" and abs(got["p_value"] - want) < 0.015
    with pytest.raises(ValueError, match="within their totals"):
        fisher_exact(3, 2, 0, 1)


def test_the_readme_renders_the_order_table_from_the_analysis():
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("readme_results", root / "scripts" / "readme_results.py")
    rr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rr)
    result = json.loads(json.dumps(analyse(_table(), PLAN)))  # as order.json holds it
    text = rr.ruler_order(result, "ruler/x")
    lines = text.splitlines()
    assert lines[0].startswith("| method |") and lines[0].endswith("| retention at 0k | at 0k against stock (p Holm) |")
    good = next(line for line in lines if line.startswith("| good |"))
    assert "1.00 [0.94, 1.00]" in good and "0.90 [" in good and "good orders above stock" in good
    assert next(line for line in lines if line.startswith("| stock |")).endswith("| - |")
    assert "the needle found under the extensions at 0k, real text against generated" in text
    assert "30-30 prompts per cell" in text
