"""The experiment config: unknown or mistyped keys fail naming the key; overrides are typed."""

from __future__ import annotations

import pytest
import yaml

from hf_trajpe.training import ConfigError, apply_overrides, config_from_dict, load_config
from hf_trajpe.training.yaml_files import read_config_file

from .runs import TINY


def tiny() -> dict:
    """The tiny experiment as one mapping (its base file's sections under its own)."""
    return read_config_file(TINY)


def test_tiny_config_loads_with_typed_overrides():
    cfg = load_config(TINY, ["train.max_steps=7", "encoding.name=trajectory", "encoding.options.strength=0.3",
                             "train.max_grad_norm=null", "data.content_types=[code_hierarchy, random_content]"])
    assert cfg.train.max_steps == 7 and isinstance(cfg.train.max_steps, int)
    assert cfg.encoding.options == {"strength": 0.3}
    assert cfg.train.max_grad_norm is None
    assert cfg.data.content_types == ["code_hierarchy", "random_content"]


@pytest.mark.parametrize("override,key,suggestion", [
    (["train.max_step=5"], "train.max_step", "max_steps"),
    (["optimiser.lr=1"], "optimiser", "optimizer"),
    (["data.block_sise=32"], "data.block_sise", "block_size"),
    (["encoding.options.strenght=0.3"], "encoding.options.strenght", "strength"),
    (["model.config.n_layers=3"], "model.config.n_layers", "n_layer"),
])
def test_unknown_key_is_named_with_the_closest_valid_one(override, key, suggestion):
    with pytest.raises(ConfigError) as err:
        load_config(TINY, override)
    assert key in str(err.value) and suggestion in str(err.value)


@pytest.mark.parametrize("override,key", [
    (["train.max_steps=ten"], "train.max_steps"),
    (["train.batch_size=2.5"], "train.batch_size"),
    (["logging.progress=maybe"], "logging.progress"),
    (["data.content_types=code"], "data.content_types"),
    (["train.mixed_precision=bf32"], "train.mixed_precision"),
    (["encoding.name=rotary"], "encoding.name"),
    (["data.content_types=[cod_hierarchy]"], "data.content_types"),
    (["encoding.options.beta=-1"], "encoding.options"),
])
def test_mistyped_value_is_named(override, key):
    with pytest.raises(ConfigError) as err:
        load_config(TINY, override)
    assert key in str(err.value)


def test_yaml_file_with_unknown_key_names_file_and_key(tmp_path):
    data = tiny()
    data["train"]["eval_evry"] = 5
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"bad.yaml.*'train.eval_evry'.*eval_every"):
        load_config(path)


def test_model_needs_exactly_one_source_and_mlm_a_real_tokenizer():
    data = tiny()
    data["model"]["path"] = "somewhere"
    with pytest.raises(ConfigError, match="exactly one"):
        config_from_dict(data)
    data = tiny()
    data["model"]["task"] = "mlm"
    with pytest.raises(ConfigError, match="masked LM"):
        config_from_dict(data)


def test_override_syntax_and_resolved_config_round_trip(tmp_path):
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["train.max_steps"])
    cfg = load_config(TINY, ["seed=3"])
    cfg.save(tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert again == cfg and again.seed == 3
    flat = cfg.flat()
    assert flat["train.max_steps"] == cfg.train.max_steps and isinstance(flat["model.config"], str)


def test_unknown_transformers_key_lists_the_model_keys():
    with pytest.raises(ConfigError) as err:
        load_config(TINY, ["model.config.n_layers=3"])
    assert "known keys of GPT2Config" in str(err.value) and "n_positions" in str(err.value)


def test_encoding_null_trains_the_model_unpatched_and_nested_keys_are_named():
    cfg = load_config(TINY, ["encoding=null", "data.order=random", "data.balance=true", "train.device=cpu"])
    assert cfg.encoding is None and cfg.data.order == "random" and cfg.train.device == "cpu"
    with pytest.raises(ConfigError, match=r"'encoding.nme'; did you mean 'name'"):
        load_config(TINY, ["encoding.nme=rope"])
    for override, key in (["data.order=shuffled", "data.order"], ["train.device=tpu", "train.device"]):
        with pytest.raises(ConfigError, match=key):
            load_config(TINY, [override])


@pytest.mark.parametrize("override,key", [
    ("train.max_steps=true", "train.max_steps"),
    ("optimizer.lr=true", "optimizer.lr"),
    ("train.max_grad_norm=false", "train.max_grad_norm"),
    ("optimizer.betas=[true, 0.99]", "optimizer.betas[0]"),
    ("seed=false", "seed"),
    ("model.config.n_layer=true", "model.config.n_layer"),
    ("model.config.resid_pdrop=false", "model.config.resid_pdrop"),
    ("model.config.num_hidden_layers=true", "model.config.num_hidden_layers"),  # an alias of n_layer
    ("encoding.options={strength: true}", "encoding.options"),
])
def test_a_boolean_is_not_a_number(override, key):
    """YAML reads `true` as a bool, and Python's bool is an int: without this check `train.max_steps: true`
    would train one step and `model.config.n_layer: true` build one layer."""
    with pytest.raises(ConfigError) as err:
        load_config(TINY, [override, "encoding.name=trajectory"])
    assert key in str(err.value) and ("True" in str(err.value) or "False" in str(err.value)
                                      or "bool" in str(err.value)), str(err.value)


def test_booleans_stay_valid_where_the_field_is_a_boolean():
    cfg = load_config(TINY, ["model.config.use_cache=false", "logging.progress=false", "data.balance=true"])
    assert cfg.model.config["use_cache"] is False and cfg.logging.progress is False and cfg.data.balance is True
