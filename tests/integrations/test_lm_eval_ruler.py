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


# -- the harness's own RULER tasks, offline, against the project's runner and generator -----------------------


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory):
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed: pip install -e \".[lm-eval]\"")
    pytest.importorskip("wonderwords", reason="the harness's RULER generators need pip install 'lm_eval[ruler]'")
    from hf_trajpe.integrations.lm_eval_ruler import run_harness_ruler

    model, tok = tiny_model("rope", rope_parameters={"rope_type": "yarn", "factor": 2.0})
    folder = tmp_path_factory.mktemp("tokenizer")
    tok.save_pretrained(folder)
    rows = run_harness_ruler(model, tok, folder, "niah_single_1", 700, limit=3, add_bos_token=False)  # (no eos)
    return model, tok, folder, rows


def test_the_harness_s_own_needle_task_runs_offline_on_a_patched_model(harness_run):
    _, _, _, rows = harness_run
    assert [r["index"] for r in rows] == [0, 1, 2]
    for r in rows:
        value, = r["answers"]
        assert r["prompt"].count(value) == 1 and r["prompt"].startswith("A special magic number is hidden")
        assert r["prompt"].endswith(" mentioned in the provided text is") and 0.0 <= r["score"] <= 1.0


def test_the_project_s_runner_reads_the_harness_s_prompts_as_the_harness_does(harness_run):
    """The same prompts through both pipelines: the same greedy continuation and the same score, so a
    difference between the two suites can come only from how their prompts are made."""
    from hf_trajpe.evaluation.ruler import run_ruler
    from hf_trajpe.evaluation.ruler.scoring import postprocess_pred
    from hf_trajpe.integrations.lm_eval_ruler import harness_samples

    model, tok, _, rows = harness_run
    ours = run_ruler(model, tok, prompts=harness_samples(rows, "niah_single_1", tok, 700), method="ours",
                     progress=False)
    assert [r["prediction"] for r in ours.rows] == [postprocess_pred(r["prediction"]) for r in rows]
    assert [r["score"] for r in ours.rows] == [r["score"] for r in rows]
    assert all(r["prediction"] for r in ours.rows), "the model wrote something: the comparison is not of blanks"


def test_the_project_s_needle_prompt_is_the_harness_s_template_and_needle(harness_run):
    import re

    from hf_trajpe.evaluation.ruler import make_samples

    _, tok, _, rows = harness_run
    ours = make_samples(tok, ["niah_single_1"], [700 - 128], 1, ["noise"], seed=0)[0]

    def shape(prompt: str, key: str, value: str) -> tuple[str, str, str]:
        lines = prompt.replace(key, "KEY").replace(value, "VALUE").split("\n")
        needle = next(line for line in lines if "VALUE" in line)
        return lines[0], needle, lines[-1]

    key = re.search(r"for (\S+) mentioned", rows[0]["prompt"]).group(1)
    theirs = shape(rows[0]["prompt"], key, rows[0]["answers"][0])
    assert shape(ours.prompt, ours.extra["queries"][0], ours.answers[0]) == theirs
    assert theirs[1] == "One of the special magic numbers for KEY is: VALUE."
    # the harness fills its haystack in coarse steps below its budget (the length less the 128 new tokens);
    # the project's prompt is within 1% of the length asked for
    harness_tokens = [len(tok(r["prompt"], add_special_tokens=False)["input_ids"]) for r in rows]
    assert all(n <= 700 for n in harness_tokens) and abs(ours.tokens - (700 - 128)) <= 0.01 * (700 - 128)
