"""scripts/ruler_order.py end to end on a tiny Llama with a byte tokenizer: the runs by length (each method where the
config says it is valid), rounds that leave every method on the same prompts, a later sitting continuing the rows,
and the analysis files; the config of the SmolLM2 table names valid patches."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import transformers as T
import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ruler_order", ROOT / "scripts" / "ruler_order.py")
ruler_order = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ruler_order)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    cfg = T.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                        bos_token_id=1, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("order") / "tiny"
    T.LlamaForCausalLM._from_config(cfg).save_pretrained(path)
    return path


@pytest.mark.slow  # about 9 CPU s; the analysis itself is in the default run (tests/evaluation/test_ruler_order.py)
def test_a_sitting_in_rounds_then_a_longer_one_and_the_analysis(tiny, tmp_path, capsys):
    rope = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048}
    cfg = {"model": str(tiny), "tokenizer": "byte", "out": str(tmp_path / "table"), "tasks": ["niah_single_1"],
           "haystacks": ["noise", "real_prose"], "lengths": [2048, 3072], "samples": 2, "seed": 0, "dtype": "float32",
           "methods": {"stock": {"patch": None}, "yarn": {"patch": {"encoding": "rope", "rope_parameters": rope}},
                       "dca": {"lengths": [3072], "patch": {"encoding": "dca", "chunk_size": 1536,
                                                             "local_window": 256}}},
           "order": {"baseline": "stock", "reference_length": 2048, "main_length": 3072, "leading": 2}}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    argv = ["--config", str(config), "--threads", "1", "--no-progress"]
    assert ruler_order.main(["run", *argv, "--samples", "1"]) == 0
    assert ruler_order.main(["run", *argv, "--step", "1"]) == 0  # continues: one more prompt per cell
    rows = ruler_order.read_rows(cfg)
    cells = {(r["method"], r["length"], r["haystack"]) for r in rows}
    assert ("dca", 2048, "noise") not in cells and ("dca", 3072, "real_prose") in cells
    assert len(rows) == 2 * 2 * 2 + 2 * 2 * 2 + 2 * 2  # stock, yarn at two lengths; dca at one; 2 haystacks x 2
    assert sorted({r["index"] for r in rows}) == [0, 1]
    assert ruler_order.main(["analyse", "--config", str(config)]) == 0
    result = json.loads((tmp_path / "table" / "order.json").read_text())
    assert {(c["a"], c["b"]) for c in result["primary"]} == {("yarn", "stock"), ("dca", "stock"),
                                                             ("real text", "generated text")}
    assert all(c["n"] == 4 for c in result["primary"] if c["b"] == "stock")
    md = (tmp_path / "table" / "order.md").read_text()
    assert "## Primary comparisons" in md and "| dca | 3,072 |" in md
    assert ruler_order.main(["cost", "--config", str(config)]) == 0
    assert "20 prompts" in capsys.readouterr().out


def test_the_smollm2_config_names_valid_patches_and_the_declared_tasks():
    from hf_trajpe.patching.config import PatchConfig

    cfg = ruler_order.load_config(ROOT / "configs" / "ruler" / "smollm2_order.yaml")
    assert cfg["tasks"] == ["niah_single_1", "niah_multikey_1", "fwe", "cwe"]
    for spec_ in cfg["methods"].values():
        if spec_["patch"] is not None:
            options = dict(spec_["patch"])
            PatchConfig.from_options(options.pop("encoding"), **options)  # refuses an invalid option
    assert set(ruler_order.methods_at(cfg, 16384)) == set(cfg["methods"]) - {"string_yarn_x4"}
    assert set(ruler_order.methods_at(cfg, 32768)) == set(cfg["methods"]) - {"string_yarn_x2"}
