"""The metric registry: what it holds, each metric against a hand-worked example, RULER's string-match scores,
the formulas the reports used before the registry (bit for bit, on random data), and docs/evaluation.md naming
every registered metric."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_trajpe.evaluation.metrics import INPUTS, METRICS, Metric, get_metric, load_metric, registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hf_trajpe" / "evaluation" / "metrics"
EXPECTED = {"cross_entropy", "perplexity", "token_accuracy", "exact_match", "answer_token_accuracy",
            "perplexity_by_window", "passkey_retrieval", "string_match_all", "string_match_part"}


def test_the_registry_holds_every_metric_each_in_its_own_module():
    assert set(METRICS) == EXPECTED
    for name, metric in METRICS.items():
        assert metric.name == name and metric.inputs in INPUTS
        assert metric.label and metric.description and metric.aggregation
        assert (PACKAGE / f"{name}.py").is_file(), f"{name}: one module per metric, evaluation/metrics/{name}.py"
        assert f'name="{name}"' in (PACKAGE / f"{name}.py").read_text()


def test_an_unknown_metric_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown metric 'bleu'; known: answer_token_accuracy, cross_entropy, ") as err:
        get_metric("bleu")
    assert all(name in str(err.value) for name in METRICS) and "docs/evaluation.md" in str(err.value)


def test_a_metric_registered_twice_or_with_unknown_inputs_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "METRICS", dict(METRICS))
    twin = Metric("perplexity", compute=len, inputs="token_losses", aggregation="-", higher_is_better=False,
                  label="twin", description="-")
    with pytest.raises(ValueError, match="'perplexity' is registered twice"):
        registry.register_metric(twin)
    odd = Metric("odd", compute=len, inputs="images", aggregation="-", higher_is_better=True, label="odd",
                 description="-")
    with pytest.raises(ValueError, match="unknown inputs 'images'; one of token_losses, token_predictions"):
        registry.register_metric(odd)
    new = Metric("new_one", compute=len, inputs="generated_text", aggregation="-", higher_is_better=True,
                 label="new", description="-")
    assert registry.register_metric(new) is new and registry.get_metric("new_one") is new
    assert "new_one" not in METRICS  # the registry of the package is left as it was


def test_content_metrics_by_hand():
    losses = np.array([0.1, 0.7, 2.2])  # 3.0 nats over 3 tokens
    assert get_metric("cross_entropy")(losses.sum(), losses.size) == pytest.approx(1.0)
    assert get_metric("perplexity")(losses.sum(), losses.size) == pytest.approx(math.e)
    # per seed: sums over two sequences each, [S] perplexities at once
    sums, counts = np.array([[1.0, 3.0], [2.0, 2.0]]), np.array([[2, 2], [1, 3]])
    np.testing.assert_allclose(get_metric("perplexity")(sums.sum(-1), counts.sum(-1)), [math.e, math.e])
    assert get_metric("token_accuracy")(2, 3) == pytest.approx(2 / 3)


def test_task_metrics_by_hand():
    correct, count = np.array([2, 1, 3, 0]), np.array([2, 2, 3, 1])  # examples 0 and 2 have every token right
    em, tokens = get_metric("exact_match"), get_metric("answer_token_accuracy")
    assert em(correct, count) == 0.5
    assert tokens(correct, count) == pytest.approx(6 / 8)
    values, weights = em.per_example(correct, count)
    assert values.tolist() == [1.0, 0.0, 1.0, 0.0] and weights is None
    values, weights = tokens.per_example(correct, count)
    assert values.tolist() == [1.0, 0.5, 1.0, 0.0] and weights.tolist() == [2.0, 2.0, 3.0, 1.0]
    assert np.average(values, weights=weights) == pytest.approx(tokens(correct, count))


def test_perplexity_by_window_by_hand():
    # two documents of 40 tokens (39 losses), trained length 16: windows 0-1x (the tokens at positions 1..15:
    # position 0 has no loss), 1-1.5x (16..23), 1.5-2x (24..31), 2-2.5x (32..39, cut at the end)
    nlls = [torch.full((39,), 1.0, dtype=torch.float64), torch.full((39,), 3.0, dtype=torch.float64)]
    nlls[1][15:23] = 5.0
    windows = get_metric("perplexity_by_window")(nlls, trained=16)
    assert [(w.start, w.stop) for w in windows] == [(0, 16), (16, 24), (24, 32), (32, 40)]
    assert [w.high for w in windows] == [1.0, 1.5, 2.0, 2.5]
    assert windows[0].counts.tolist() == [15.0, 15.0] and windows[0].sums.tolist() == [15.0, 45.0]
    assert windows[0].ppl == pytest.approx(math.exp(2.0))  # (15 x 1 + 15 x 3) / 30
    assert windows[1].ppl == pytest.approx(math.exp(3.0))  # (8 x 1 + 8 x 5) / 16
    with pytest.raises(ValueError, match="no documents"):
        get_metric("perplexity_by_window")([], trained=16)


def test_passkey_retrieval_by_hand():
    answers = [" 40213.", "The key is 4021", "4-0-2-1-3 and 9", "402139"]  # digits: 40213, 4021, 402139, 402139
    metric = get_metric("passkey_retrieval")
    assert metric.per_example(answers, ["40213"] * 4)[0].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert metric(answers, ["40213"] * 4) == 0.75
    with pytest.raises(ValueError, match="3 answers for 4 keys"):
        metric(answers[:3], ["40213"] * 4)


# ---- RULER's string-match scores (NVIDIA/RULER, scripts/eval/synthetic/constants.py): the reference strings of
# an example are searched in its prediction, ignoring case; RULER reports the mean times 100, rounded.

PREDICTIONS = ["The numbers are 123 and 456.", "apple BANANA", "nothing here", "Paris, then london"]
REFERENCES = [["123", "456", "789"], ["banana", "Apple"], ["x y"], ["Paris", "Rome", "London", "Oslo"]]


def test_string_match_all_is_the_mean_share_of_references_found():
    metric = get_metric("string_match_all")
    # per example: 2 of 3, 2 of 2 (case ignored both ways), 0 of 1, 2 of 4
    assert metric.per_example(PREDICTIONS, REFERENCES)[0].tolist() == pytest.approx([2 / 3, 1.0, 0.0, 0.5])
    assert metric(PREDICTIONS, REFERENCES) == pytest.approx((2 / 3 + 1 + 0 + 0.5) / 4)


def test_string_match_part_is_the_share_of_examples_with_any_reference_found():
    metric = get_metric("string_match_part")
    assert metric.per_example(PREDICTIONS, REFERENCES)[0].tolist() == [1.0, 1.0, 0.0, 1.0]
    assert metric(PREDICTIONS, REFERENCES) == 0.75
    assert metric(["I think it is PARIS"], [["paris", "france"]]) == 1.0
    assert get_metric("string_match_all")(["I think it is PARIS"], [["paris", "france"]]) == 0.5


def _ruler(predictions, references, every: bool) -> float:
    """RULER's scores as its paper defines them: per example the share (all) or the presence (part) of the
    references found in the prediction, lower-cased; the mean over examples times 100, rounded to 2 decimals."""
    per = []
    for pred, refs in zip(predictions, references, strict=True):
        hits = [r.lower() in pred.lower() for r in refs]
        per.append(sum(hits) / len(refs) if every else float(any(hits)))
    return round(sum(per) / len(per) * 100, 2)


def test_string_match_scores_agree_with_ruler_on_random_texts():
    rng = np.random.default_rng(0)
    words = ["alpha", "Beta", "GAMMA", "delta", "42", "x"]
    for _ in range(50):
        n = int(rng.integers(1, 6))
        preds = [" ".join(rng.choice(words, int(rng.integers(0, 5)))) for _ in range(n)]
        refs = [list(rng.choice(words, int(rng.integers(1, 4)))) for _ in range(n)]
        for name, every in (("string_match_all", True), ("string_match_part", False)):
            assert round(get_metric(name)(preds, refs) * 100, 2) == _ruler(preds, refs, every)


@pytest.mark.parametrize("name", ["string_match_all", "string_match_part"])
def test_string_match_refuses_what_it_cannot_score(name):
    metric = get_metric(name)
    with pytest.raises(ValueError, match="no predictions to score"):
        metric([], [])
    with pytest.raises(ValueError, match="2 predictions but 1 lists of references"):
        metric(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="example 0 has no reference strings"):
        metric(["a"], [[]])
    with pytest.raises(ValueError, match=r"one string \('a'\); give a list of strings, e.g. \['a'\]"):
        metric(["a"], ["a"])


# ---- the formulas the scorers and reports held before the registry, on random data: bit for bit


def test_pooled_metrics_equal_the_former_inline_formulas_bit_for_bit():
    rng = np.random.default_rng(1)
    ppl, ce, acc = get_metric("perplexity"), get_metric("cross_entropy"), get_metric("token_accuracy")
    for _ in range(20):
        losses = rng.exponential(2.5, int(rng.integers(1, 5000)))
        mean = float(losses.mean())  # the evaluate module: cross_entropy = mean, perplexity = np.exp(mean)
        assert float(ce(losses.sum(), losses.size)) == mean and float(ppl(losses.sum(), losses.size)) == float(
            np.exp(mean))
        nll, count = rng.exponential(200, (3, 40)), rng.integers(50, 90, (3, 40)).astype(np.float64)
        assert np.array_equal(ppl(nll.sum(-1), count.sum(-1)), np.exp(nll.sum(-1) / count.sum(-1)))  # per seed
        w = np.stack([np.bincount(rng.integers(0, 40, 40), minlength=40) for _ in range(30)]).astype(np.float64)
        assert np.array_equal(ppl(w @ nll.T, w @ count.T), np.exp((w @ nll.T) / (w @ count.T)))  # resampled
        pred, ref = rng.integers(0, 4, 700), rng.integers(0, 4, 700)
        assert float(acc(int((pred == ref).sum()), ref.size)) == float((pred == ref).mean())


def test_task_metrics_equal_the_former_inline_formulas_bit_for_bit():
    rng = np.random.default_rng(2)
    em, tokens = get_metric("exact_match"), get_metric("answer_token_accuracy")
    for _ in range(20):
        count = rng.integers(1, 7, int(rng.integers(1, 300)))
        correct = np.minimum(count, rng.integers(0, 9, count.size))
        exact = correct == count
        assert em(correct, count) == float(exact.mean())
        assert float(tokens(correct, count)) == float(correct.sum() / count.sum())
        v = np.stack([correct, count], 1)[rng.integers(0, count.size, count.size)]  # a resample of the examples
        assert tokens(v[:, 0], v[:, 1]) == v[:, 0].sum() / v[:, 1].sum()
        assert np.array_equal(em.per_example(correct, count)[0], exact.astype(np.float64))
        assert np.array_equal(tokens.per_example(correct, count)[0], correct / count)


def test_window_perplexity_equals_the_former_formula_bit_for_bit():
    rng = np.random.default_rng(3)
    nlls = [torch.tensor(rng.exponential(2.0, 700)) for _ in range(4)]
    for w in get_metric("perplexity_by_window")(nlls, trained=64):
        assert w.ppl == math.exp(w.sums.sum() / w.counts.sum())
        lo, hi = max(w.start - 1, 0), w.stop - 1
        assert w.sums.tolist() == [float(n[lo:hi].sum()) for n in nlls]


def test_display_formats_are_those_the_reports_printed():
    x = 0.123456789
    assert get_metric("perplexity").format(12.3456) == f"{12.3456:.2f}"  # report.md, long_context.md, study.md
    assert get_metric("token_accuracy").format(x) == f"{x:.3f}"  # report.md
    assert get_metric("cross_entropy").format(x) == f"{x:.3f}"  # study.md, the training table
    for name in ("exact_match", "answer_token_accuracy"):
        assert get_metric(name).format(x) == f"{100 * x:.1f}" == "12.3"  # tasks.md
    for missing in (None, float("nan"), float("inf")):
        assert get_metric("perplexity").format(missing) == "n/a"


def test_the_evaluate_modules_compute_through_the_registry():
    rng = np.random.default_rng(4)
    losses = rng.exponential(2.0, 333)
    out = load_metric("token_cross_entropy").compute(nll=losses)
    assert out["cross_entropy"] == float(get_metric("cross_entropy")(losses.sum(), losses.size))
    assert out["perplexity"] == float(get_metric("perplexity")(losses.sum(), losses.size))
    pred, ref = rng.integers(0, 3, 200), rng.integers(-1, 3, 200)
    ref[ref < 0] = -100
    keep = ref != -100
    got = load_metric("token_accuracy").compute(predictions=pred, references=ref)
    assert got["accuracy"] == float(get_metric("token_accuracy")(int((pred[keep] == ref[keep]).sum()), keep.sum()))


# ---- docs/evaluation.md lists every registered metric


def metrics_table() -> str:
    """The table of docs/evaluation.md's section Metrics, from the registry."""
    def shown(m: Metric) -> str:
        decimals = f"{m.digits} decimal{'' if m.digits == 1 else 's'}"
        return {"%": f"percent, {decimals}", "": decimals}.get(m.unit, f"{m.unit}, {decimals}")

    rows = ["| metric | in reports | scores from | aggregation | better | shown as |", "|---|---|---|---|---|---|"]
    rows += [f"| `{m.name}` | {m.label} | {m.inputs.replace('_', ' ')} | {m.aggregation} | "
             f"{'higher' if m.higher_is_better else 'lower'} | {shown(m)} |"
             for m in sorted(METRICS.values(), key=lambda m: (list(INPUTS).index(m.inputs), m.name))]
    return "\n".join(rows)


def test_the_docs_list_every_registered_metric():
    text = (ROOT / "docs" / "evaluation.md").read_text()
    start = text.index("\n## Metrics\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end != -1 else None]
    table = metrics_table()
    assert table in section, "docs/evaluation.md, section Metrics: replace the table by\n\n" + table
    named = set(re.findall(r"^\| `(\w+)`", section, flags=re.M))
    assert named == set(METRICS)


def test_the_metrics_import_no_scorer_report_or_study():
    from tests.test_import_graph import import_graph

    graph = import_graph(ROOT / "hf_trajpe")
    metrics = [m for m in graph if m.startswith("hf_trajpe.evaluation.metrics.")
               and ".evaluate_modules." not in m]
    assert len(metrics) >= len(EXPECTED)
    for module in metrics:
        outside = {t for t in graph[module] if not t.startswith("hf_trajpe.evaluation.metrics")}
        assert not outside, f"{module} imports {outside}: a metric needs nothing but its neighbours"
    evaluation = [m for m in graph if m.startswith("hf_trajpe.evaluation")]
    assert not {t for m in evaluation for t in graph[m] if t.startswith("hf_trajpe.study")}
