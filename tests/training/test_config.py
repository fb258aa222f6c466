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


#: a tiny Llama (a rotary module shared by its layers: layer selections apply) from scratch
LLAMA = ("model.config={model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 4, "
         "num_attention_heads: 2, num_key_value_heads: 1, vocab_size: 259, max_position_embeddings: 256, "
         "bos_token_id: 1, eos_token_id: 1, pad_token_id: 0}")


def test_encoding_takes_a_layer_selection_and_a_layer_map():
    from hf_trajpe.training.model import build_model

    cfg = load_config(TINY, [LLAMA, "encoding.name=none", "encoding.options.layers=every:2:1"])
    assert cfg.encoding.patch_arguments() == ("none", {"layers": "every:2:1"})
    model, handle = build_model(cfg)
    assert handle.layers == (1, 3)
    layer_map = {"every:2:1": "none", "0": {"name": "alibi"}, 2: {"name": "rope", "options": {"rotary_fraction": 0.5}}}
    cfg = config_from_dict(dict(tiny(), model=load_config(TINY, [LLAMA]).to_dict()["model"],
                                encoding={"layers": layer_map}))
    model, handle = build_model(cfg)
    assert [h.layers for h in handle.handles] == [(1, 3), (0,), (2,)]
    assert handle.configs[2].rotary_fraction == 0.5
    assert yaml.safe_load(yaml.safe_dump(cfg.to_dict()))["encoding"]["layers"]["every:2:1"] == "none"


@pytest.mark.parametrize("encoding,match", [
    ({"name": "none", "options": {"layers": "every:0"}}, r"encoding.options: layers 'every:0': every:N needs N >= 1"),
    ({"name": "rope", "layers": {"0": "none"}}, "encoding.layers is a layer map .* leave encoding.name"),
    ({"layers": {"0": "nonee"}}, r"encoding.layers.0.name: unknown encoding 'nonee'; did you mean 'none'"),
    ({"layers": {"0": {"name": "cope", "options": {"npos": 3}}}}, r"encoding.layers.0.options.npos: not an option"),
    ({"layers": {"0": {"name": "none", "options": {"layers": "1"}}}}, r"encoding.layers.0.options.layers: .*its key"),
    ({"layers": {"0": {"encoding": "none"}}}, r"encoding.layers.0: an entry of a layer map is an encoding name"),
    ({"layers": {}}, "encoding.layers: a layer map needs at least one entry"),
])
def test_layer_map_errors_name_the_key(encoding, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict(dict(tiny(), encoding=encoding))
