"""The recovery study (hf_trajpe.study.suites.recovery): its config and plan, the engine running its runs through
``accelerate launch`` of a recipe (here a stand-in recipe that writes what the real one writes, so no model is
needed), resume, the report, the refusal without the model, and scripts/recovery_curve.py's overrides."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from hf_trajpe.study import load_study_config, run_study
from hf_trajpe.study.suites.recovery.config import RecoveryStudyConfig, run_name
from hf_trajpe.training.config import ConfigError
from hf_trajpe.training.yaml_files import read_config_file

ROOT = Path(__file__).resolve().parents[3]
STUDY = ROOT / "configs/study/recovery.yaml"
EXPERIMENT = ROOT / "configs/experiments/smollm2_lora_native.yaml"

#: a stand-in for recipes/finetune.py: the files a run of the recipe leaves (eval.json, metrics.jsonl, final/)
RECIPE = '''
import json, sys
from pathlib import Path
import yaml
cfg = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
out = Path(cfg["output_dir"]); out.mkdir(parents=True, exist_ok=True)
with open(out.parent / "launches.txt", "a") as fh:
    fh.write(cfg["name"] + (" --resume" if "--resume" in sys.argv else "") + "\\n")
swapped = cfg["encoding"]["name"] != "native"
steps = cfg["train"]["max_steps"]
ppl = [(30.0 if swapped else 10.0) - s + (0.5 * cfg["seed"] if s else 0.0) for s in range(0, steps + 1, 2)]
evals = [{"step": s, "real_text": {"perplexity": p, "loss": 1.0}} for s, p in zip(range(0, steps + 1, 2), ppl)]
(out / "eval.json").write_text(json.dumps(evals))
(out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "train/loss": 3.0 - s / 10,
                                                       "train/tokens_per_second": 1024.0}) + "\\n"
                                           for s in range(1, steps + 1)))
(out / "final").mkdir(exist_ok=True)
(out / "final" / "config.json").write_text("{}")
'''


@pytest.fixture
def installed(monkeypatch):
    """Every model source resolves (the study's check of its model), whether SmolLM2 is installed or not."""
    import hf_trajpe.loading

    monkeypatch.setattr(hf_trajpe.loading, "resolve_source", lambda spec, what="model": Path(str(spec)))


def _study(tmp_path: Path, **over) -> Path:
    recipe = tmp_path / "recipe.py"
    recipe.write_text(RECIPE)
    data = yaml.safe_load(STUDY.read_text())
    data.update({"experiment": str(EXPERIMENT), "recipe": str(recipe), "quick": [],
                 "accelerate": str(ROOT / "configs/accelerate/cpu.yaml"), "output_dir": str(tmp_path / "runs"),
                 "report_dir": str(tmp_path / "report"), **over})
    path = tmp_path / "recovery.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_yaml_keeps_the_scripts_defaults_and_plans_native_once(installed, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_study_config(STUDY)
    assert isinstance(cfg, RecoveryStudyConfig) and list(cfg.encodings) == ["native", "trajectory", "alibi", "none",
                                                                             "cope"]
    assert (cfg.layers, cfg.steps, cfg.threads, cfg.seeds, cfg.report_dir) == (["all"], None, None, [0],
                                                                                "docs/results/recovery")
    assert (cfg.eval.chunks, cfg.eval.real_sequences, cfg.eval.type_sequences) == (8, 16, 2)
    assert cfg.encoding_section(cfg.runs()[1]) == {"name": "trajectory",
                                                   "options": {"strength": 0.2, "learnable_strength": True}}
    layered = load_study_config(STUDY, overrides=["layers=[top:2, '0-3,5', all]"])
    assert [r.name for r in layered.runs()][:4] == ["native", "trajectory_top2", "trajectory_0to3_5", "trajectory"]
    assert layered.options(layered.runs()[1]) == {"encoding": "trajectory", "strength": 0.2,
                                                  "learnable_strength": True, "layers": "top:2"}
    assert run_name("none", "top:8") == "none_top8" and run_name("none", "all") == "none"
    for bad, match in ((["seeds=[0, 0]"], "distinct seeds"), (["seeds=[]"], "distinct seeds"),
                       (["layers=[top:x]"], "layers: "),
                       (["encodings={a: {encoding: native}, b: {encoding: native}}"], "one entry may be the stock"),
                       (["experiment=nowhere.yaml"], "experiment: no file at 'nowhere.yaml'")):
        with pytest.raises(ConfigError, match=match):
            load_study_config(STUDY, overrides=bad)


def test_without_its_model_the_study_is_refused_before_anything_runs(tmp_path, monkeypatch):
    exp = read_config_file(EXPERIMENT)  # its base: resolved, so the copy stands alone
    exp["model"]["path"] = exp["model"]["tokenizer"] = "package:no_such_model_package/m.gguf"
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    path = _study(tmp_path, experiment=str(tmp_path / "exp.yaml"))
    with pytest.raises(ConfigError, match=r"recovery\.yaml: experiment .*exp\.yaml: model\.path .*the Python package "
                                          r"'no_such_model_package' is not installed; install it with .*the recovery "
                                          "study fine-tunes and scores that model, so it must be installed first"):
        load_study_config(path)
    assert not (tmp_path / "runs").exists()


def test_the_engine_runs_each_run_through_the_recipe_resumes_and_reports(tmp_path, installed):
    path = _study(tmp_path, encodings={"native": {"encoding": "native"}, "none": {"encoding": "none"}},
                  layers=["top:2"], steps=4, eval={"recovery": False})
    cfg = load_study_config(path)
    logs: list[str] = []
    paths = run_study(cfg, command="hf-trajpe study --config recovery.yaml", progress=False, log=logs.append,
                      summary=False)
    models = tmp_path / "runs" / "models"
    assert (models / "launches.txt").read_text().split() == ["smollm2_recovery_native", "smollm2_recovery_none_top2"]
    native = json.loads((models / "native_s0" / "train_summary.json").read_text())
    swapped = json.loads((models / "none_top2_s0" / "train_summary.json").read_text())
    assert native["patch"] is None and swapped["patch"]["layers"] == "top:2" and swapped["first_loss"] == 2.9
    assert not list(models.glob("*.tmp")) and (models / "none_top2_s0" / "final" / "config.json").is_file()
    run_cfg = yaml.safe_load((tmp_path / "report" / "configs" / "none_top2.yaml").read_text())
    assert run_cfg["encoding"] == {"name": "none", "options": {"layers": "top:2"}}
    assert run_cfg["train"]["max_steps"] == 4 and run_cfg["output_dir"] == str(models / "none_top2_s0.tmp")
    md = paths["study_md"].read_text()
    assert paths["study_md"] == tmp_path / "report" / "recovery.md"
    assert "Command: `hf-trajpe study --config recovery.yaml`." in md
    assert "Stock model (no swap, no training): perplexity **10.00**." in md
    assert "| 4 | 6.00 | 26.00 |" in md
    assert "Steps to the stock perplexity: native step 0; none_top2 not within 4." in md
    saved = json.loads((tmp_path / "report" / "recovery.json").read_text())
    assert saved["curves"]["none_top2"][0] == {"step": 0, "perplexity": 30.0, "loss": 1.0}
    again = run_study(load_study_config(path), progress=False, log=logs.append, summary=False)
    assert "reusing 2 trained models" in "\n".join(logs) and again["study_md"].read_text().count("| 4 |") == 1
    assert len((models / "launches.txt").read_text().split()) == 2  # nothing trained again


def test_several_seeds_train_a_run_per_seed_and_report_the_mean_curve_with_its_range(tmp_path, installed):
    path = _study(tmp_path, encodings={"native": {"encoding": "native"}, "none": {"encoding": "none"}},
                  layers=["top:2"], steps=4, seeds=[0, 1], eval={"recovery": False})
    paths = run_study(load_study_config(path), progress=False, log=lambda m: None, summary=False)
    models = tmp_path / "runs" / "models"
    assert sorted(p.name for p in models.iterdir() if p.is_dir()) == ["native_s0", "native_s1", "none_top2_s0",
                                                                      "none_top2_s1"]
    assert json.loads((models / "none_top2_s1" / "train_summary.json").read_text())["seed"] == 1
    md = paths["study_md"].read_text()
    assert "2 seeds (0, 1)" in md and "| 4 | 6.25 (6.00-6.50) | 26.25 (26.00-26.50) |" in md
    assert "Stock model (no swap, no training): perplexity **10.00**." in md  # step 0: every seed the stock model
    assert "none_top2 not within 4 (per seed: not within 4, not within 4)" in md
    saved = json.loads((tmp_path / "report" / "recovery.json").read_text())
    assert saved["seeds"] == [0, 1] and saved["curves_per_seed"]["native"]["1"][-1]["perplexity"] == 6.5
    assert saved["curves"]["native"][-1] == {"step": 4, "perplexity": 6.25, "loss": 1.0, "per_seed": [6.0, 6.5]}


def _script():
    spec = importlib.util.spec_from_file_location("recovery_curve", ROOT / "scripts" / "recovery_curve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_passes_its_options_to_the_study_as_overrides(installed, monkeypatch):
    monkeypatch.chdir(ROOT)
    script = _script()
    args = script.parse_args(["--encodings", "native", "none", "--layers", "top:2", "--steps", "2", "--threads", "1",
                              "--no-extrapolation", "--recovery-types", "real_text", "code_hierarchy",
                              "--recovery-chunks", "3", "--out", "/tmp/x"])
    cfg = load_study_config(STUDY, overrides=script.overrides(args))
    assert list(cfg.encodings) == ["native", "none"] and cfg.layers == ["top:2"] and (cfg.steps, cfg.threads) == (2, 1)
    assert cfg.eval.types == ["real_text", "code_hierarchy"] and cfg.eval.chunks == 3 and cfg.report_dir == "/tmp/x"
    assert cfg.eval.recovery and not cfg.eval.extrapolation
    plain = load_study_config(STUDY, overrides=script.overrides(script.parse_args(["--no-eval"])))
    assert not plain.eval.recovery and not plain.eval.extrapolation and len(plain.encodings) == 5
