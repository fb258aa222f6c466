"""The study configs' shared base (hf_trajpe.study.base_config), the suite registry and ``base:`` in study YAMLs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from hf_trajpe.study import load_study_config
from hf_trajpe.study.base_config import BaseStudyConfig
from hf_trajpe.study.config import read_study_data
from hf_trajpe.study.registry import SUITES, register_suite
from hf_trajpe.training.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TASKS, PILOT = ROOT / "configs/study/tasks.yaml", ROOT / "configs/study/tasks_pilot.yaml"


def test_every_suite_is_registered_with_a_config_of_the_base_that_saves_every_field_in_order():
    assert list(SUITES) == ["content", "tasks", "extension", "recovery"]
    for name, suite in SUITES.items():
        assert suite.name == name and issubclass(suite.config, BaseStudyConfig)
        fields = [f.name for f in dataclasses.fields(suite.config)]
        assert sorted(suite.config.ORDER) == sorted(fields), name  # to_dict keeps every field, each once
        assert {"name", "seeds", "output_dir", "report_dir", "workers", "quick"} <= set(fields)


def test_a_second_suite_of_a_registered_name_is_refused():
    class Other:
        name = "tasks"
        config = BaseStudyConfig

    with pytest.raises(ValueError, match="suite 'tasks' is registered already"):
        register_suite(Other)
    assert type(SUITES["tasks"]).__name__ == "TaskSuite"


def test_the_pilot_is_the_task_study_with_its_overrides_and_the_same_config_as_before():
    """tasks_pilot.yaml names tasks.yaml as its base: the config it loads is the one the pilot's own full file gave
    (its fingerprint, taken before the file had a base, so the pilot's trained models are still reused)."""
    assert "base" in yaml.safe_load(PILOT.read_text().replace("!replace", ""))
    pilot, tasks = load_study_config(PILOT), load_study_config(TASKS)
    assert pilot.fingerprint() == "85b48a5882770861"
    assert list(pilot.tasks) == ["selective_copy", "flip_flop", "counting"] and pilot.per_task == {}
    assert list(pilot.encodings) == ["learned", "rope", "cope"] and pilot.comparisons == [] and pilot.quick == []
    assert (pilot.data.train, pilot.data.test, pilot.train.steps) == (1000, 100, 300)
    assert pilot.model == tasks.model and pilot.eval == tasks.eval and pilot.data.validation == tasks.data.validation
    with pytest.raises(ConfigError, match="no 'quick:' list of overrides"):
        load_study_config(PILOT, quick=True)


def test_a_study_yaml_deep_merges_over_its_base_and_replace_drops_the_bases_keys(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(
        {"name": "b", "train": {"steps": 10, "lr": 0.1}, "encodings": {"a": 1, "b": 2}, "seeds": [0, 1]}))
    (tmp_path / "sub" / "mid.yaml").write_text("base: ../base.yaml\ntrain: {steps: 20}\nencodings: {c: 3}\n")
    (tmp_path / "sub" / "top.yaml").write_text("base: mid.yaml\nencodings: !replace {d: 4}\nseeds: [5]\n")
    assert read_study_data(tmp_path / "sub" / "mid.yaml") == {
        "name": "b", "train": {"steps": 20, "lr": 0.1}, "encodings": {"a": 1, "b": 2, "c": 3}, "seeds": [0, 1]}
    top = read_study_data(tmp_path / "sub" / "top.yaml", overrides=["train.lr=0.5"])
    assert top == {"name": "b", "train": {"steps": 20, "lr": 0.5}, "encodings": {"d": 4}, "seeds": [5]}
    assert type(top["encodings"]) is dict  # plain mappings once merged


def test_a_cycle_of_bases_or_a_missing_base_is_refused_naming_the_files(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nname: b\n")
    with pytest.raises(ConfigError, match=r"b\.yaml: base: the base files form a cycle \(.*a\.yaml -> .*b\.yaml -> "
                                          r".*a\.yaml\); one of them must not name a base"):
        read_study_data(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: nowhere.yaml\nname: c\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: base: 'nowhere\.yaml' does not exist"):
        load_study_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("name: d\nseeds: !replace [1]\n")
    with pytest.raises(ConfigError, match=r"d\.yaml: not valid YAML: !replace tags a mapping"):
        read_study_data(tmp_path / "d.yaml")


def test_a_child_of_the_task_study_loads_like_it_with_its_own_keys(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text(f"base: {TASKS}\nreport_dir: {tmp_path / 'r'}\ntrain: {{steps: 123}}\n")
    cfg, tasks = load_study_config(child), load_study_config(TASKS)
    assert cfg.train.steps == 123 and cfg.train.lr == tasks.train.lr and cfg.per_task == tasks.per_task
    assert cfg.to_dict() | {"report_dir": tasks.report_dir, "train": tasks.to_dict()["train"]} == tasks.to_dict()
