"""``--quick`` checks the file's own values before its quick profile replaces them, and an extension study whose
real model cannot be read says so in its report, not only in one line on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hf_trajpe.cli import main
from hf_trajpe.study import load_study_config, run_study
from hf_trajpe.training.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "configs" / "study"


@pytest.mark.parametrize("config,key,value,message", [
    ("default.yaml", "train.steps", "ten", "train.steps: expected an integer, got 'ten'"),
    ("default.yaml", "seeds", 0, "seeds: expected a list, got 0"),
    ("extension.yaml", "eval.factors", [0, 2], "(at factor 0): extend must be a number >= 1"),
], ids=["steps", "seeds", "factors"])
def test_quick_checks_the_file_before_its_profile_replaces_a_bad_value(config, key, value, message, tmp_path,
                                                                         capsys):
    data = yaml.safe_load((STUDIES / config).read_text())
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node[part]
    node[last] = value
    path = tmp_path / config
    path.write_text(yaml.safe_dump(data))
    assert any(item.startswith(f"{key}=") for item in data["quick"]), "the quick profile replaces this key"
    with pytest.raises(ConfigError, match="checked before --quick replaces it") as err:
        load_study_config(path, quick=True)
    assert message in str(err.value)
    with pytest.raises(ConfigError):  # and without --quick, as before
        load_study_config(path)
    assert main(["study", "--quick", "--config", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_an_extension_study_without_its_real_model_says_so_in_the_report(tmp_path):
    missing = tmp_path / "no_such_model"
    overrides = [f"output_dir={tmp_path / 'runs'}", f"report_dir={tmp_path / 'report'}", "workers=1", "seeds=[0]",
                 "model.num_hidden_layers=1", "model.hidden_size=16", "model.intermediate_size=32",
                 "model.num_attention_heads=2", "model.num_key_value_heads=2", "model.max_position_embeddings=16",
                 "data.block_size=16", "data.train=4", "data.test=4", "train.steps=1", "train.warmup_steps=0",
                 "train.log_every=1", "eval.factors=[2]", "eval.max_sequences=2", "eval.n_resamples=10",
                 "finetune=null", "methods={stock: null, pi: {encoding: rope, rope_parameters: {rope_type: linear}}}",
                 "comparisons=[]", "published=[]",
                 f"real={{model: {missing}, tokenizer: byte, length: 64, kinds: [stdlib], documents: 1, "
                 "passkey_lengths: [], n_resamples: 10}"]
    logs = []
    paths = run_study(load_study_config(STUDIES / "extension.yaml", overrides=overrides), progress=False,
                      log=logs.append, summary=False)
    md = paths["study_md"].read_text()
    assert f"## Real model: not read ({missing})" in md
    assert "does not exist" in md and "run the study again" in md
    assert any("skipping the real model (the report says so)" in m for m in logs), logs
