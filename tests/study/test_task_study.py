"""The task study: its config (a study config with a ``tasks:`` section, optional encodings), the
answer-loss flags of its training rows, and a minuscule study that trains, scores, reports, records a
length the model cannot run, and is resumed without training again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_trajpe.study import load_study_config, run_study
from hf_trajpe.study.tasks import training_rows
from hf_trajpe.study.tasks_config import TaskStudyConfig
from hf_trajpe.training.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "configs" / "study" / "tasks.yaml")
MISSING = "{encoding: not_in_this_install}"  # an encoding no install has: what cope is where it is absent


def test_task_config_lists_the_tasks_and_encodings_and_skips_optional_missing_ones():
    cfg = load_study_config(TASKS)
    assert isinstance(cfg, TaskStudyConfig) and list(cfg.tasks) == ["selective_copy", "counting", "flip_flop"]
    assert {"learned", "sinusoidal", "rope", "alibi", "none", "trajectory_rope", "trajectory_rope_learnable",
            "trajectory_alibi", "trajectory_alibi_learnable", "cope"} == set(cfg.encodings)
    assert cfg.encodings["cope"]["encoding"] == "cope" and "cope" in cfg.optional_encodings
    quick = load_study_config(TASKS, quick=True)
    assert list(quick.tasks) == ["selective_copy"] and list(quick.encodings) == ["learned", "rope", "cope"]
    assert quick.seeds == [0, 1] and quick.train.steps < cfg.train.steps and quick.output_dir != cfg.output_dir
    other = load_study_config(TASKS, overrides=[f"encodings.future={MISSING}", "optional_encodings=[future]"])
    assert "future" in other.unavailable() and "future" not in other.available_encodings()
    with pytest.raises(ConfigError, match="encodings.future: unknown encoding"):
        load_study_config(TASKS, overrides=[f"encodings.future={MISSING}"])
    with pytest.raises(ConfigError, match="tasks.flipflop: unknown task"):
        load_study_config(TASKS, overrides=["tasks={flipflop: {}}"])
    with pytest.raises(ConfigError, match="tasks.passkey: task passkey: unknown option"):
        load_study_config(TASKS, overrides=["tasks.passkey={lenght: 64}"])
    with pytest.raises(ConfigError, match="data.loss"):
        load_study_config(TASKS, overrides=["data.loss=answer"])


def test_training_rows_carry_the_loss_on_the_answer_tokens_only():
    encoded = [([5, 6, 7, 8], [False, False, True, True]), ([9, 6], [False, True])]
    ids, mask = training_rows(encoded, 5, pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 0], [9, 6, 0, 0, 0]]
    assert mask.tolist() == [[False, False, True, True, False], [False, True, False, False, False]]
    _, every = training_rows(encoded, 5, pad_id=0, loss="all")
    assert every.tolist() == [[False, True, True, True, False], [False, True, False, False, False]]
    with pytest.raises(ValueError, match="more than the training length"):
        training_rows(encoded, 3, pad_id=0)


def test_tiny_task_study_end_to_end_and_resume(tmp_path):
    overrides = [f"output_dir={tmp_path / 'runs'}", f"report_dir={tmp_path / 'report'}", "workers=1", "seeds=[0]",
                 "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.n_positions=32", "train.steps=2",
                 "train.warmup_steps=1", "train.log_every=1", "data.train=8", "data.validation=2", "data.test=6",
                 "eval.n_resamples=20", "eval.batch_size=4",
                 # the sparse split (3 symbols among 40 blanks: 47 tokens) is longer than the 32 learned positions
                 "tasks={selective_copy: {tokens: 3, blanks: 3, blanks_sparse: 40, blanks_dense: 1}}",
                 "encodings={learned: {encoding: native}, traj: {encoding: trajectory, base: alibi, strength: 0.2}, "
                 f"future: {MISSING}}}", "optional_encodings=[future]", "equivalence_margin=3", "per_task={}",
                 "comparisons=[]"]
    cfg = load_study_config(TASKS, overrides=overrides)
    paths = run_study(cfg, command="test", progress=False, log=lambda m: None)
    study = json.loads(paths["study_json"].read_text())
    results = study["tasks"]["selective_copy"]["results"]["learned"]
    assert set(results) == {"test", "test_ood_sparse", "test_ood_dense"}
    for split in ("test", "test_ood_dense"):
        em = results[split]["exact_match"]
        assert 0 <= em["mean"] <= 1 and em["n_examples"] == 6 and em["ci"][0] <= em["mean"] <= em["ci"][1]
    assert results["test_ood_sparse"]["skipped"].startswith("IndexError")
    assert study["skipped_encodings"].keys() == {"future"} and len(study["training"]) == 2
    vs = study["tasks"]["selective_copy"]["results"]["traj"]["test"]["vs_baseline"]
    from hf_trajpe.evaluation.verdicts import plain_verdict

    # the verdict is the one its own interval gives on the configured margin (or the floor/ceiling label)
    ci, ci_eq = tuple(100 * x for x in vs["ci"]), tuple(100 * x for x in vs["ci_equivalence"])
    assert vs["margin_points"] == 3
    assert vs["verdict"] == plain_verdict(ci, ci_eq, 3, unit=" points", degenerate=vs.get("degenerate"))
    traj = study["tasks"]["selective_copy"]["results"]["traj"]["test"]["exact_match"]["mean"]
    assert vs["difference"] == pytest.approx(traj - results["test"]["exact_match"]["mean"])
    assert vs["method"].startswith("one seed")  # seeds=[0]: no seed spread to estimate, and the report says so
    stats = study["tasks"]["selective_copy"]["positions"]["traj"]["test"]
    assert 1.0 < stats["step_mean"] <= 1.2 and stats["displacement_max"] > 0
    assert set(study["tasks"]["selective_copy"]["positions"]) == {"traj"}
    assert study["tasks"]["selective_copy"]["training_length"] == 10
    md = paths["study_md"].read_text()
    assert "## selective_copy" in md and "| `learned` |" in md and "skipped encoding `future`" in md
    assert md.index("## Summary") < md.index("## Details") < md.index("## selective_copy")
    assert "within ±3 points" in md and "mean step" in md
    folder = tmp_path / "runs" / "models" / "selective_copy" / "learned_s0"
    # the trajectory model's positions come from the scoring forwards: every split it ran
    assert (folder / "experiment.yaml").is_file() and (folder / "train_summary.json").is_file()

    # run again: the model is reused, nothing trains, the report is rewritten
    before = (folder / "model.safetensors").stat().st_mtime_ns
    run_study(cfg, command="test", progress=False, log=lambda m: None)
    assert (folder / "model.safetensors").stat().st_mtime_ns == before
    assert len((tmp_path / "runs" / "training_sessions.jsonl").read_text().splitlines()) == 1
    assert json.loads(paths["study_json"].read_text())["tasks"]["selective_copy"]["positions"]["traj"]


def test_per_task_plan_and_comparisons_config_errors():
    cfg = load_study_config(TASKS, overrides=["per_task={counting: {encodings: [learned, alibi], train: {steps: 7}}}",
                                              "comparisons=[[trajectory_rope, rope], [cope, rope]]"])
    assert list(cfg.task_encodings("counting")) == ["learned", "alibi"] and cfg.for_task("counting").train.steps == 7
    assert cfg.for_task("flip_flop").train.steps == cfg.train.steps and len(cfg.task_encodings("flip_flop")) == 10
    assert cfg.task_comparisons("counting") == [] and cfg.task_comparisons("flip_flop") == [
        ("trajectory_rope", "rope"), ("cope", "rope")]
    assert cfg.fingerprint() != load_study_config(TASKS).fingerprint()  # other steps: other models
    lossy = load_study_config(TASKS, overrides=["per_task={counting: {data: {loss: all, test: 9}}}"])
    assert lossy.for_task("counting").data.loss == "all" and lossy.for_task("counting").data.test == 9
    assert lossy.for_task("flip_flop").data.loss == "answers" and lossy.fingerprint() != cfg.fingerprint()
    bad = {"per_task={counting: {encodings: [alibi]}}": "baseline 'learned' must be trained on every task",
           "per_task={counting: {encodings: [alibi, learned, alibbi]}}": r"\['alibbi'\] are not in encodings",
           "per_task={counTing: {}}": "'counTing' is not one of the study's tasks",
           "per_task={counting: {train: {stepz: 3}}}": "per_task.counting.train: expected fields of train",
           "per_task={counting: {train: {steps: 0}}}": "per_task.counting: train.steps must be >= 1",
           "per_task={counting: {seeds: [1]}}": "expected a mapping of 'encodings', 'train' and/or 'data'",
           "per_task={counting: {data: {loss: answer}}}": "per_task.counting: data.loss: 'answer' is not one of",
           "per_task={counting: {data: {tset: 3}}}": "per_task.counting.data: expected fields of data",
           "comparisons=[[cope, rpoe]]": "comparisons: each entry is \\[model, reference\\]",
           "comparisons=[[cope, cope]]": "comparisons: each entry"}
    for override, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_study_config(TASKS, overrides=[override])


def test_task_study_trains_each_task_its_own_encodings_and_steps_and_compares_pairs(tmp_path):
    overrides = [f"output_dir={tmp_path / 'runs'}", f"report_dir={tmp_path / 'report'}", "workers=1", "seeds=[0]",
                 "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.n_positions=64", "train.steps=2",
                 "train.warmup_steps=1", "train.log_every=1", "data.train=8", "data.validation=2", "data.test=6",
                 "eval.n_resamples=20", "eval.batch_size=4",
                 "tasks={selective_copy: {tokens: 3, blanks: 3, blanks_sparse: 6, blanks_dense: 1}, "
                 "counting: {min_steps: 3, max_steps: 4, ood_min_steps: 5, ood_max_steps: 6}}",
                 "encodings={learned: {encoding: native}, alibi: {encoding: alibi}, "
                 "traj: {encoding: trajectory, base: alibi, strength: 0.2}}",
                 "per_task={counting: {encodings: [learned], train: {steps: 3}, data: {loss: all}}}",
                 "comparisons=[[traj, alibi]]"]
    paths = run_study(load_study_config(TASKS, overrides=overrides), command="test", progress=False,
                      log=lambda m: None)
    study = json.loads(paths["study_json"].read_text())
    trained = {(s["task"], s["name"]): s["steps"] for s in study["training"]}
    assert trained == {("selective_copy", "learned"): 2, ("selective_copy", "alibi"): 2,
                       ("selective_copy", "traj"): 2, ("counting", "learned"): 3}
    assert set(study["tasks"]["counting"]["results"]) == {"learned"}
    cell = study["tasks"]["selective_copy"]["results"]["traj"]["test"]
    pair = cell["vs"]["alibi"]
    assert set(cell["vs"]) == {"alibi"}
    alibi = study["tasks"]["selective_copy"]["results"]["alibi"]["test"]["exact_match"]["mean"]
    assert pair["difference"] == pytest.approx(cell["exact_match"]["mean"] - alibi), "traj - alibi, not the baseline"
    assert "vs" not in study["tasks"]["selective_copy"]["results"]["alibi"]["test"]
    md = paths["study_md"].read_text()
    assert "**counting** (3 steps of 32, loss on every token)" in md and "**selective_copy** (2 steps of" in md
    assert md.count("| `traj` − `alibi` |") == 2  # the summary and the task's section
