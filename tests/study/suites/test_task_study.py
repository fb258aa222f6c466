"""The task study: its config (a study config with a ``tasks:`` section, optional encodings, one step budget per
task), the answer-loss flags of its training rows, training data per model seed, the budget chosen on
validation, a report whose verdicts are Holm-adjusted, and a minuscule study that trains, scores (numbers checked
against the saved models scored again), reports, records a length the model cannot run, and is resumed without
training again."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest

from hf_trajpe.data import byte_tokenizer
from hf_trajpe.evaluation import load_model
from hf_trajpe.evaluation.answers import AnswerScores, exact_match
from hf_trajpe.evaluation.verdicts import significance
from hf_trajpe.study import load_study_config, run_study
from hf_trajpe.study.rows import load_rows
from hf_trajpe.study.suites.tasks.config import TaskStudyConfig
from hf_trajpe.study.suites.tasks.eval import choose_budget
from hf_trajpe.study.suites.tasks.report import write_task_report
from hf_trajpe.study.suites.tasks.suite import TaskSuite, training_rows
from hf_trajpe.training.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]
TASKS = str(ROOT / "configs" / "study" / "tasks.yaml")
MISSING = "{encoding: not_in_this_install}"  # an encoding no install has: what cope is where it is absent


def test_task_config_lists_the_tasks_and_encodings_and_skips_optional_missing_ones():
    cfg = load_study_config(TASKS)
    assert isinstance(cfg, TaskStudyConfig) and list(cfg.tasks) == ["selective_copy", "counting", "flip_flop"]
    assert {"learned", "sinusoidal", "rope", "alibi", "none", "trajectory_rope", "trajectory_rope_learnable",
            "trajectory_alibi", "trajectory_alibi_learnable", "cope", "cope_sqrt_d"} == set(cfg.encodings)
    assert cfg.encodings["cope"]["encoding"] == "cope" and "cope" in cfg.optional_encodings
    assert cfg.encodings["cope_sqrt_d"]["position_logit_scale"] == "sqrt_d"
    assert list(cfg.task_encodings("flip_flop")) == ["learned", "rope", "cope", "trajectory_rope"]
    assert ["cope_sqrt_d", "cope"] in cfg.comparisons and cfg.step_candidates("flip_flop") == [1500]
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
    assert results["test_ood_sparse"]["skipped"].startswith("IndexError")
    assert study["skipped_encodings"].keys() == {"future"} and len(study["training"]) == 2
    # the report's numbers are what the saved model scores on the saved test split, scored here again
    folder = tmp_path / "runs" / "models" / "selective_copy" / "learned_s0"
    dd = datasets.load_from_disk(str(tmp_path / "runs" / "data" / "selective_copy" / "seed_0"))
    again = exact_match(load_model(str(folder)), dd["test"], byte_tokenizer(), batch_size=3, n_resamples=10)
    assert results["test"]["exact_match"]["mean"] == pytest.approx(float(again.exact.mean()))
    assert results["test"]["token_accuracy"]["mean"] == pytest.approx(again.correct.sum() / again.count.sum())
    assert results["test"]["exact_match"]["n_examples"] == 6
    # every difference the report shows is one comparison of the Holm family (degenerate ones excepted)
    cells = [c for per in study["tasks"]["selective_copy"]["results"].values() for c in per.values()]
    shown = [d for c in cells for k in ("vs_baseline", "token_vs_baseline") if k in c for d in [c[k]]]
    tested = [d for d in shown if not d.get("degenerate")]
    assert len(shown) == 4 and study["method"]["family_size"] == len(tested)
    assert all(d["family_size"] == len(tested) for d in shown)
    vs = study["tasks"]["selective_copy"]["results"]["traj"]["test"]["vs_baseline"]
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
    assert "within ±3 points" in md and "mean step" in md and "**Answer-token accuracy (%)**" in md
    assert f"Holm's adjustment across the {len(tested)} comparison" in md
    assert "drawn anew for each model seed" in md  # data.vary_with_seed, the default, said in the report
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
    assert cfg.for_task("flip_flop").train.steps == cfg.train.steps
    assert len(cfg.task_encodings("flip_flop")) == len(cfg.encodings) == 11
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
           "per_task={counting: {seeds: [1]}}": "expected a mapping of 'encodings', 'train', 'data' and/or 'budget'",
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
                 "counting: {min_steps: 3, max_steps: 4, ood_min_steps: 5, ood_max_steps: 6, ood_min_value: 2}}",
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
    assert ("**counting**: 3 steps for every encoding (the config's train.steps, not chosen on validation); batches "
            "of 32, loss on every token") in md and "**selective_copy**: 2 steps for every encoding" in md
    # rows of the pair: the summary and the task's section (exact match, token accuracy) ...
    assert sum(line.startswith("| `traj` − `alibi` |") for line in md.splitlines()) == 3
    # ... and one per metric and split in the task's table of every comparison
    assert md.count("| `traj` − `alibi` |") == 3 + 2 * 3


def test_a_per_encoding_step_count_is_refused_every_encoding_of_a_task_trains_as_long():
    with pytest.raises(ConfigError, match=r"encodings.cope: .*unknown patch option\(s\) \['steps'\]"):
        load_study_config(TASKS, overrides=["encodings.cope={encoding: cope, npos_max: 256, steps: 1500}"])
    cfg = load_study_config(TASKS)
    for task in cfg.tasks:  # the default config: one step count per task, from train or per_task.<task>.train
        assert not set(cfg.per_task.get(task, {}).get("train", {})) - {"steps"}
    with pytest.raises(ConfigError, match="budget.candidates: a list of distinct step counts"):
        load_study_config(TASKS, overrides=["budget.candidates=[300, 300]"])
    with pytest.raises(ConfigError, match="per_task.counting: budget.candidates"):
        load_study_config(TASKS, overrides=["per_task={counting: {budget: {candidates: [0]}}}"])


def test_the_budget_is_the_best_mean_validation_exact_match_then_token_accuracy_then_fewer_steps():
    scores = {300: {("a", 0): (0.25, 0.5), ("b", 0): (0.25, 0.5)},  # mean exact match 0.25
              600: {("a", 0): (0.5, 0.75), ("b", 0): (0.25, 0.5)},  # 0.375, token 0.625
              1200: {("a", 0): (0.75, 0.75), ("b", 0): (0.0, 0.5)}}  # 0.375, token 0.625: a tie, fewer steps win
    got = choose_budget(scores)
    assert got["chosen"] == 600 and got["candidates"] == [300, 600, 1200]
    assert got["validation"][300]["exact_match"] == 0.25
    assert got["validation"][600]["per_encoding"] == {"a": 0.5, "b": 0.25}
    scores[1200][("b", 0)] = (0.0, 0.75)  # now 1200 has the higher token accuracy at the same exact match
    assert choose_budget(scores)["chosen"] == 1200
    assert choose_budget({300: {("a", 0): (0.0, 0.1)}, 600: {("a", 0): (0.0, 0.1)}})["chosen"] == 300


def _tiny(tmp_path, *extra: str) -> list[str]:
    return [f"output_dir={tmp_path / 'runs'}", f"report_dir={tmp_path / 'report'}", "workers=1",
            "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.n_positions=64", "train.steps=2",
            "train.warmup_steps=1", "train.log_every=1", "data.train=8", "data.validation=4", "data.test=6",
            "eval.n_resamples=20", "eval.batch_size=4", "per_task={}", "comparisons=[]",
            "tasks={selective_copy: {tokens: 3, blanks: 3, blanks_sparse: 6, blanks_dense: 1}}", *extra]


def test_each_model_seed_trains_on_its_own_data_and_every_model_is_scored_on_the_same_tests(tmp_path):
    cfg = load_study_config(TASKS, overrides=_tiny(tmp_path, "seeds=[0, 1]",
                                                   "encodings={learned: {encoding: native}, alibi: {encoding: alibi}}"))
    suite, out = TaskSuite(), tmp_path / "runs"
    part = suite.parts(cfg, log=lambda m: None)[0]
    prepared = suite.prepare(cfg, part, out, log=lambda m: None)
    dsets = prepared.extra["datasets"]
    assert set(dsets) == {0, 1} and dsets[0]["test"]["text"] == dsets[1]["test"]["text"]
    assert dsets[0]["train"]["text"] != dsets[1]["train"]["text"]
    runs = suite.plan(cfg, part, out)
    rows = {r.seed: r.rows for r in runs}
    assert rows == {0: out / "data" / "selective_copy" / "seed_0" / "train_rows.pt",
                    1: out / "data" / "selective_copy" / "seed_1" / "train_rows.pt"}
    assert not np.array_equal(load_rows(rows[0]).train.numpy(), load_rows(rows[1]).train.numpy())
    fixed = load_study_config(TASKS, overrides=_tiny(tmp_path / "fixed", "seeds=[0, 1]", "data.vary_with_seed=false"))
    part = suite.parts(fixed, log=lambda m: None)[0]
    suite.prepare(fixed, part, tmp_path / "fixed" / "runs", log=lambda m: None)
    assert {r.rows for r in suite.plan(fixed, part, tmp_path / "fixed" / "runs")} == {None}
    assert fixed.fingerprint() != cfg.fingerprint()  # other training data: other models


def test_the_budget_chosen_on_validation_is_the_one_scored_on_test(tmp_path):
    overrides = _tiny(tmp_path, "seeds=[0]", "encodings={learned: {encoding: native}, alibi: {encoding: alibi}}",
                      "per_task={selective_copy: {budget: {candidates: [1, 4]}}}")
    paths = run_study(load_study_config(TASKS, overrides=overrides), command="test", progress=False,
                      log=lambda m: None)
    study = json.loads(paths["study_json"].read_text())
    budget = study["tasks"]["selective_copy"]["budget"]
    assert budget["candidates"] == [1, 4] and study["tasks"]["selective_copy"]["steps"] == budget["chosen"]
    assert {(s["name"], s["steps"]) for s in study["training"]} == {(n, c) for n in ("learned", "alibi")
                                                                    for c in (1, 4)}
    # the validation means are the saved models' own scores on their validation split, scored here again
    models = tmp_path / "runs" / "models" / "selective_copy"
    dd = datasets.load_from_disk(str(tmp_path / "runs" / "data" / "selective_copy" / "seed_0"))
    tok = byte_tokenizer()
    for steps in (1, 4):
        ems = [exact_match(load_model(str(models / f"steps_{steps}" / f"{n}_s0")), dd["validation"], tok,
                           batch_size=4, n_resamples=1).exact.mean() for n in ("learned", "alibi")]
        assert budget["validation"][str(steps)]["exact_match"] == pytest.approx(float(np.mean(ems)))
    chosen = models / f"steps_{budget['chosen']}" / "alibi_s0"
    test = exact_match(load_model(str(chosen)), dd["test"], tok, batch_size=4, n_resamples=1)
    got = study["tasks"]["selective_copy"]["results"]["alibi"]["test"]["exact_match"]["mean"]
    assert got == pytest.approx(float(test.exact.mean()))
    md = paths["study_md"].read_text()
    assert f"{budget['chosen']} steps for every encoding, chosen on the validation split from [1, 4]" in md


def _scores(counts: tuple[int, int, int], n: int = 200) -> list[AnswerScores]:
    """Three seeds that get the first ``counts[k]`` of ``n`` examples right (4 answer tokens each, all right or
    none)."""
    out = []
    for k in counts:
        exact = np.arange(n) < k
        out.append(AnswerScores(exact, 4 * exact.astype(np.int64), np.full(n, 4), {}))
    return out


def test_a_report_does_not_call_better_what_only_its_raw_p_value_calls_better(tmp_path):
    """RoPE's exact match is 11 points above the learned table's on every split (per seed +11, +10, +12
    points): raw p = 0.035 and the 95% interval [+1.8, +20.2] excludes 0, which alone would read "better".
    The report shows 6 comparisons (2 metrics x 3 splits); Holm multiplies the smallest p by 6: 0.21."""
    cfg = load_study_config(TASKS, overrides=_tiny(tmp_path, "seeds=[0, 1, 2]", "eval.n_resamples=2000",
                                                   "encodings={learned: {encoding: native}, rope: {encoding: rope}}"))
    splits = ("test", "test_ood_sparse", "test_ood_dense")
    scores = {"learned": {s: _scores((100, 104, 96)) for s in splits},
              "rope": {s: _scores((122, 124, 120)) for s in splits}}
    results = {"selective_copy": {"scores": scores, "length": 10, "lengths": {s: 10.0 for s in splits},
                                  "steps": 2, "budget": None, "positions": {}}}
    timing = {"tasks": {"selective_copy": {"new_models": 0, "train_wall_seconds": 0.0, "eval_wall_seconds": 0.0}},
              "total_wall_seconds": 0.0}
    paths = write_task_report(cfg, results, [], {}, timing, {}, "test")
    study = json.loads(paths["study_json"].read_text())
    d = study["tasks"]["selective_copy"]["results"]["rope"]["test"]["vs_baseline"]
    assert d["difference"] == pytest.approx(0.11) and d["p_value"] == pytest.approx(0.0355, abs=2e-3)
    assert d["ci"][0] > 0 and significance(tuple(100 * x for x in d["ci"])) == "better"
    assert study["method"]["family_size"] == 6 and d["p_holm"] == pytest.approx(6 * d["p_value"])
    assert d["significance"] == "no significant difference" and d["verdict"].startswith("no significant difference")
    md = paths["study_md"].read_text()
    table_rows = [line for line in md.splitlines() if line.startswith("| `rope`")]
    assert table_rows and not any("▲" in line for line in table_rows)
    # six equal p-values: Benjamini-Hochberg leaves each at 0.035, a call at a 5% false discovery rate only
    assert "| `rope` | +11.0 [+1.8, +20.2] △ |" in md and d["p_bh"] == pytest.approx(d["p_value"])
    assert d["significance_bh"] == "better" and "△/▽ better/worse under the other correction" in md
    assert "| exact match | test | `rope` − baseline | +11.0 | [1.8, 20.2] | 0.03" in md and "| 0.21" in md
    assert "61.0 [" in md and "<br>per seed 61.0 / 62.0 / 60.0<br>" in md  # RoPE's seeds, each one shown


def test_a_study_of_some_tasks_reuses_the_folder_of_the_whole_and_leaves_its_marker(tmp_path):
    from hf_trajpe.study.records import check_output_dir

    whole = load_study_config(TASKS)
    check_output_dir(whole, tmp_path)
    marker = (tmp_path / "study.json").read_text()
    part = load_study_config(TASKS, overrides=["tasks={flip_flop: {}}", "baseline=cope", "comparisons=[]",
                                               "per_task={flip_flop: {encodings: [cope, cope_sqrt_d]}}"])
    assert part.fingerprint() != whole.fingerprint() and part.covered_by(whole.to_dict())
    check_output_dir(part, tmp_path)  # the flip-flop models of the whole are this study's
    assert (tmp_path / "study.json").read_text() == marker
    check_output_dir(whole, tmp_path)  # and the whole still resumes after it
    for other in (["tasks={flip_flop: {instructions: 32}}", "per_task={}"],  # other task options
                  ["tasks={flip_flop: {}}", "per_task={flip_flop: {train: {steps: 9}}}"],  # other training
                  ["tasks={flip_flop: {}}", "per_task={}", "train.lr=0.001"]):
        with pytest.raises(FileExistsError, match="different model/data/training settings"):
            check_output_dir(load_study_config(TASKS, overrides=other), tmp_path)


def test_a_single_budget_candidate_is_reported_as_set_in_advance_not_chosen():
    from hf_trajpe.study.suites.tasks.eval import choose_budget
    from hf_trajpe.study.suites.tasks.report import _budget_words

    cfg = load_study_config(TASKS)
    one = choose_budget({1500: {("rope", 0): (0.5, 0.8), ("cope", 0): (0.3, 0.7)}})
    words = _budget_words(cfg, "flip_flop", {"budget": one, "steps": 1500})
    assert words.startswith("1500 steps for every encoding, set in advance") and "chosen on" not in words
    two = choose_budget({600: {("rope", 0): (0.5, 0.8)}, 1500: {("rope", 0): (0.6, 0.8)}})
    assert "chosen on the validation split from [600, 1500]" in _budget_words(cfg, "flip_flop",
                                                                            {"budget": two, "steps": 1500})
