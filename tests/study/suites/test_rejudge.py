"""Re-judging a published content study from its JSON: the recomputed interval is the one the study makes
now, a mismatch of per-seed values is refused, and comparisons without per-seed values are counted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hf_trajpe.evaluation.bootstrap import delta_with_intervals
from hf_trajpe.study.suites.content.rejudge import rejudge_delta, rejudge_markdown, rejudge_study


def _nll(rng, shift: float, seed_shift: np.ndarray, n: int = 80) -> np.ndarray:
    base = rng.gamma(20.0, 0.1, size=n) * 128
    return np.stack([base * (1 + shift + s) + rng.normal(0, 4, n) for s in seed_shift])


def test_the_recomputed_interval_is_the_one_the_study_makes_from_the_sequences():
    rng = np.random.default_rng(3)
    count = np.full(80, 128.0)
    base = _nll(rng, 0.0, np.array([0.0, 0.01, -0.01]))
    enc = _nll(np.random.default_rng(3), -0.02, np.array([0.004, 0.018, -0.012]))
    now = delta_with_intervals(base, count, enc, count, n_resamples=4000)
    published = {k: now[k] for k in ("delta_pct", "ci_sequences", "level")}  # what an old JSON kept
    seeds_b = np.exp(base.sum(1) / count.sum()).tolist()
    seeds_e = np.exp(enc.sum(1) / count.sum()).tolist()
    again = rejudge_delta(published, seeds_b, seeds_e)
    width = now["ci"][1] - now["ci"][0]
    assert again["ci"] == pytest.approx(now["ci"], abs=0.03 * width)
    assert again["p_value"] == pytest.approx(now["p_value"], rel=0.15, abs=1e-3)
    assert again["df"] == now["df"] == 2.0
    with pytest.raises(ValueError, match="not the same models"):
        rejudge_delta(published, seeds_b, [x * 1.01 for x in seeds_e])


def _delta(ppl_b: list[float], ppl_e: list[float], verdict: str) -> dict:
    mean_b, mean_e = float(np.mean(ppl_b)), float(np.mean(ppl_e))
    delta = (mean_b - mean_e) / mean_b * 100
    return {"delta_pct": delta, "ci_sequences": [delta - 1.0, delta + 1.0], "level": 0.95, "ci": [delta - 1.5,
            delta + 1.5], "verdict": verdict}


def test_a_study_is_rejudged_with_its_unseen_comparisons_counted(tmp_path):
    learned, rope = [10.0, 10.2, 9.9], [5.0, 5.1, 4.9]
    traj = [5.02, 5.05, 4.93]
    report = {"results": {n: {"code": {"128": {"per_seed": [{"perplexity": p} for p in v]}}}
                          for n, v in (("learned", learned), ("rope", rope), ("trajectory_rope", traj))},
              "deltas": {"rope": {"code": {"128": _delta(learned, rope, "better")}},
                         "trajectory_rope": {"code": {"128": _delta(learned, traj, "better")}}}}
    sweep_delta = _delta(rope, [4.0, 4.1, 3.9], "better")  # a sweep model whose per-seed values were not kept
    study = {"baseline": "learned", "meta": {"equivalence_margin": 2.0, "level": 0.95},
             "trajectory_effect": {"trajectory_rope": {"base": "rope",
                                                       "deltas": {"code": {"128": _delta(rope, traj, "worse")}}}},
             "comparisons": {},
             "sweep": {"models": {"0.0": "rope", "0.2": "trajectory_rope", "0.5": "sweep_strength_0.5"},
                       "deltas_vs_strength_0": {"code": {"0.0": {}, "0.2": {"128": _delta(rope, traj, "worse")},
                                                         "0.5": {"128": sweep_delta}}}}}
    (tmp_path / "study.json").write_text(json.dumps(study))
    (tmp_path / "report.json").write_text(json.dumps(report))
    result = rejudge_study(tmp_path)
    # rope/learned, trajectory/learned, trajectory/rope (shown twice, once as the effect, once as strength
    # 0.2: one comparison), and the unseen strength 0.5
    assert result["unseen"] == 1 and result["family_size"] == 4
    effect = next(g for g in result["groups"] if g["kind"] == "trajectory against its base")["deltas"]["code"]["128"]
    assert effect["published_verdict"] == "worse" and effect["family_size"] == 4
    assert "claim_verdict" in effect and "p_bh" in effect and effect["p_holm"] >= effect["p_value"]
    rope_d = result["groups"][0]["deltas"]["code"]["128"]
    assert rope_d["delta_pct"] == pytest.approx(50.0, abs=1.0) and rope_d["significance_bh"] == "better"
    md = rejudge_markdown(result)
    assert "| code | 128 | +" in md and "1 strength-sweep comparisons" in md


RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "study"


@pytest.mark.parametrize("report", ["tasks", "tasks/cope_scale"])
def test_the_published_task_reports_are_what_their_json_gives_again(report, tmp_path):
    """Re-judging a published (already re-judged) task study from its JSON changes nothing: the verdicts in the
    JSON and every line of tasks.md come back as published."""
    from hf_trajpe.study.suites.tasks.rejudge import rejudge_task_report

    for name in ("tasks.json", "tasks.md"):
        shutil.copy(RESULTS / report / name, tmp_path / name)
    command = "python scripts/rejudge_task_study.py"
    if report != "tasks":
        command += f" --report-dir docs/results/{report}"
    assert rejudge_task_report(tmp_path, CONFIGS / "tasks.yaml", command) == []
    assert (tmp_path / "tasks.md").read_text() == (RESULTS / report / "tasks.md").read_text()
    published = json.loads((RESULTS / report / "tasks.json").read_text())
    assert json.loads((tmp_path / "tasks.json").read_text())["tasks"] == published["tasks"]


@pytest.mark.slow  # about 5 CPU seconds: every comparison of every content type is made again
def test_the_published_extension_report_is_what_its_json_gives_again(tmp_path):
    """`python -m pytest -m slow tests/study/suites/test_rejudge.py`: the published study.md is what
    scripts/rerender_extension_study.py writes from study.json, and no verdict changes."""
    from hf_trajpe.study.suites.extension.rerender import rerender_extension_report

    shutil.copytree(RESULTS / "extension" / "study", tmp_path / "study")
    assert rerender_extension_report(tmp_path / "study", CONFIGS / "extension.yaml") == []
    assert (tmp_path / "study" / "study.md").read_text() == (RESULTS / "extension" / "study" / "study.md").read_text()


def test_a_task_study_whose_seeds_all_agree_loses_its_certainty_when_re_judged(tmp_path):
    """The pilot's older JSON: every seed at 100% against 0% was "better" on a zero-width interval; the legacy
    re-judging replaces it with the sign-flip bound and lists the change at the top of tasks.md."""
    from hf_trajpe.study.suites.tasks.rejudge import rejudge_legacy_report

    for name in ("tasks.json", "tasks.md"):
        shutil.copy(RESULTS / "tasks_pilot" / name, tmp_path / name)
    rejudge_legacy_report(tmp_path, "python scripts/rejudge_task_study.py --report-dir docs/results/tasks_pilot "
                                    "--legacy")
    assert (tmp_path / "tasks.md").read_text() == (RESULTS / "tasks_pilot" / "tasks.md").read_text()
    d = json.loads((tmp_path / "tasks.json").read_text())["tasks"]["selective_copy"]["results"]["cope"]["test"]
    assert d["vs_baseline"]["earlier_verdict"] == "better" and d["vs_baseline"]["p_value"] == pytest.approx(0.25)
    assert d["vs_baseline"]["ci"] == [-1.0, 1.0] and d["exact_match"]["ci"] == [0.0, 1.0]
