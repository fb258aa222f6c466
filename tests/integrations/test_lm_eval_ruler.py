"""RULER's tasks in lm-evaluation-harness: prompts written offline, one YAML per task, RULER's score."""

from __future__ import annotations

import json

import pytest

from hf_trajpe.integrations.lm_eval_data import expand_tasks, read_jsonl, ruler_path, write_task_data
from hf_trajpe.integrations.lm_eval_ruler import write_ruler_data

from .tiny import tiny_model

TASKS = ["niah_single_1", "fwe"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from hf_trajpe.data import byte_tokenizer

    out = write_task_data(tmp_path_factory.mktemp("lm_eval_ruler"), content_types=["random_content"], n_docs=1,
                          tasks=["counting"], n_task=1)
    return write_ruler_data(out, byte_tokenizer(), tasks=TASKS, lengths=[600], samples=2,
                            haystacks=["noise", "convergent_flow"])


def test_the_prompts_are_written_beside_the_other_tasks_data(data):
    rows = read_jsonl(ruler_path(data, "niah_single_1"))
    assert [(r["haystack"], r["index"]) for r in rows] == [("noise", 0), ("noise", 1), ("convergent_flow", 0),
                                                            ("convergent_flow", 1)]
    assert all(r["prompt"].count(r["answers"][0]) == 1 and 594 <= r["tokens"] <= 600 for r in rows)
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["tasks"] == ["counting"] and manifest["ruler"]["tasks"] == TASKS
    assert expand_tasks(["hf_trajpe_ruler"], data) == ["hf_trajpe_ruler_niah_single_1", "hf_trajpe_ruler_fwe"]


def test_every_ruler_task_has_its_yaml_with_ruler_s_new_tokens():
    import yaml

    from hf_trajpe.evaluation.ruler import get_task, task_names
    from hf_trajpe.integrations.lm_eval import TASKS_DIR

    for name in task_names():
        spec = yaml.safe_load((TASKS_DIR / f"hf_trajpe_ruler_{name}.yaml").read_text())
        assert spec["task"] == f"hf_trajpe_ruler_{name}" and spec["tag"] == "hf_trajpe_ruler"
        assert spec["dataset_kwargs"] == {"task": name}
        assert spec["generation_kwargs"]["max_gen_toks"] == get_task(name).max_new_tokens


def test_the_harness_scores_ruler_prompts_with_ruler_s_metric(data):
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed: pip install -e \".[lm-eval]\"")
    from importlib.util import module_from_spec, spec_from_file_location

    from hf_trajpe.integrations import lm_eval as he

    spec = spec_from_file_location("lm_eval_task_utils", he.TASKS_DIR / "utils.py")  # the harness loads it by path
    utils = module_from_spec(spec)
    spec.loader.exec_module(utils)

    row = read_jsonl(ruler_path(data, "fwe"))[0]
    assert utils.process_ruler(row, [" " + row["target"] + "."]) == {"string_match_all": 1.0}
    assert utils.process_ruler(row, [" " + row["answers"][0]]) == {"string_match_all": pytest.approx(1 / 3)}
    model, tok = tiny_model("rope")
    results = he.evaluate(model, tok, ["hf_trajpe_ruler"], data, max_length=600 + 128)
    res = results["results"]
    assert set(res) == {"hf_trajpe_ruler_niah_single_1", "hf_trajpe_ruler_fwe"}
    assert all(0.0 <= r["string_match_all,none"] <= 1.0 for r in res.values())
    with pytest.raises(FileNotFoundError, match="write_ruler_data"):
        utils.ruler_docs("vt", data_dir=str(data))
