"""The extension study's methods are checked on the study's own model when the config is read: what only the
model can refuse (a DCA chunk past the trained length, chosen on validation or fixed) fails before anything
trains, naming the method; a choice among values that are the same once read is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_trajpe.study import load_study_config
from hf_trajpe.study.suites.extension.config import choice_of
from hf_trajpe.training.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]
EXTENSION = str(ROOT / "configs" / "study" / "extension.yaml")
#: the study's trained length is 128 (data.block_size): a DCA chunk of 200 reaches past it
BASE = ["real=null", "data.validation=10"]


def test_a_chosen_dca_chunk_past_the_trained_length_is_refused_naming_the_method():
    with pytest.raises(ConfigError, match=r"methods\.dca \(at factor 2, chunk_size 200\): chunk_size \(dca\) must "
                                          r"not exceed the trained length 128"):
        load_study_config(EXTENSION, overrides=[*BASE, "methods.dca={encoding: dca, chunk_size: {choose: [64, 200]}}"])


def test_a_fixed_dca_chunk_past_the_trained_length_is_refused_naming_the_method():
    with pytest.raises(ConfigError, match=r"methods\.dca \(at factor 2\): chunk_size \(dca\) must not exceed"):
        load_study_config(EXTENSION, overrides=[*BASE, "methods.dca={encoding: dca, chunk_size: 200}"])


def test_a_finetuned_method_is_checked_at_the_finetune_factor_too():
    """``finetune.factor`` need not be one of ``eval.factors``: a chunk of ``32*factor`` is 96 at 3, 192 at 6."""
    method = "methods.dca={encoding: dca, chunk_size: 32*factor, local_window: 8}"
    ok = [*BASE, method, "eval.factors=[2, 3]", "finetune.methods=[stock, dca]", "finetune.factor=2"]
    assert load_study_config(EXTENSION, overrides=ok).methods["dca"]["chunk_size"] == "32*factor"
    with pytest.raises(ConfigError, match=r"methods\.dca \(at factor 6\): chunk_size \(dca\) must not exceed"):
        load_study_config(EXTENSION, overrides=[*ok[:-1], "finetune.factor=6"])


def test_the_shipped_extension_configs_pass_the_model_check():
    for name in ("extension.yaml", "extension_remaps.yaml"):
        load_study_config(str(ROOT / "configs" / "study" / name))
        load_study_config(str(ROOT / "configs" / "study" / name), quick=True)


@pytest.mark.parametrize("values,same", [("[0, 0.0]", "0 and 0.0"), ("[0.5, 1, 1.0]", "1 and 1.0")])
def test_a_choice_of_the_same_value_twice_is_refused(values, same):
    method = f"methods.c={{encoding: trajectory, base: rope, extend: factor, strength: {{choose: {values}}}}}"
    with pytest.raises(ConfigError, match=rf"methods\.c: strength: .*two or more distinct values.*{same} are the "
                                          "same value; give each value once"):
        load_study_config(EXTENSION, overrides=[*BASE, method])


def test_values_the_same_once_read_are_one_value():
    with pytest.raises(ValueError, match="are the same value"):
        choice_of({"encoding": "self_extend", "group_size": {"choose": ["2*factor", "2.0 * factor"]}})
    with pytest.raises(ValueError, match="are the same value"):
        choice_of({"encoding": "rope", "rope_parameters": {"choose": [{"rope_type": "yarn", "factor": 2},
                                                                      {"factor": 2.0, "rope_type": "yarn"}]}})
    assert choice_of({"encoding": "self_extend", "group_size": {"choose": ["2*factor", "3*factor", 2]}})[1] == [
        "2*factor", "3*factor", 2]
    assert choice_of({"encoding": "trajectory", "strength": {"choose": [0.0, 0.5]}}) == ("strength", [0.0, 0.5])
