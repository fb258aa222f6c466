"""lm-evaluation-harness on patched tiny models and hf_trajpe's local tasks (hf_trajpe.integrations.lm_eval)."""

from __future__ import annotations

import json
import math

import pytest

from hf_trajpe.integrations.lm_eval_data import (
    ANSWER_TASKS,
    answer_path,
    answer_row,
    expand_tasks,
    perplexity_path,
    read_jsonl,
    write_task_data,
)

from .tiny import tiny_model

TYPES = ["linear_progression", "code_hierarchy", "random_content"]


def _lm_eval():
    return pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed: "
                                                 "pip install -e \".[lm-eval]\"")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_task_data(tmp_path_factory.mktemp("lm_eval_data"), content_types=TYPES, n_docs=3,
                           tasks=["counting", "passkey"], n_task=3, passkey_length=128)


# -- the data (no harness needed) ------------------------------------------------------------------


def test_data_is_the_test_split_hf_trajpe_eval_scores(data):
    from hf_trajpe.data import build_dataset

    for ctype in TYPES:
        assert [r["text"] for r in read_jsonl(perplexity_path(data, ctype))] == \
            build_dataset(ctype, train=0, validation=0, test=3, seed=0)["test"]["text"]


def test_answer_rows_split_the_task_text_at_its_last_answer(data):
    from hf_trajpe.data.tasks import build_task

    rows = build_task("passkey", train=0, validation=0, test=3, seed=0, length=128)
    for split in ANSWER_TASKS["passkey"]:
        written = read_jsonl(answer_path(data, "passkey", split))
        for row, ours in zip(rows[split], written, strict=True):
            assert ours["prompt"].endswith("What is the pass key? The pass key is")
            assert ours["answer"] == row["text"][-5:] and ours["answer"].isdigit()
            assert ours["prompt"] + " " + ours["answer"] == row["text"]
    assert answer_row("x|abc", [[2, 5]], "s")["prompt"] == "x|"


def test_tags_expand_to_the_tasks_the_folder_holds(data):
    assert expand_tasks(["hf_trajpe_ppl", "hf_trajpe_answers", "hf_trajpe_passkey"], data) == [
        *(f"hf_trajpe_ppl_{t}" for t in TYPES), "hf_trajpe_counting", "hf_trajpe_counting_ood",
        "hf_trajpe_counting_ood_value",
        "hf_trajpe_passkey_1x", "hf_trajpe_passkey_2x", "hf_trajpe_passkey_4x"]


def test_is_match_reads_the_answer_at_the_start_of_the_generation():
    from importlib.util import module_from_spec, spec_from_file_location

    from hf_trajpe.integrations.lm_eval import TASKS_DIR

    spec = spec_from_file_location("lm_eval_task_utils", TASKS_DIR / "utils.py")
    utils = module_from_spec(spec)
    spec.loader.exec_module(utils)
    assert utils.is_match(" 52817.", "52817") and utils.is_match("1w0i1", "1")
    assert not utils.is_match(" 10", "1") and not utils.is_match("5281", "52817") and not utils.is_match("x1", "1")


def test_every_shipped_task_has_its_yaml_and_package_data():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")
    from hf_trajpe.integrations.lm_eval import TASKS_DIR

    names = {p.stem for p in TASKS_DIR.glob("*.yaml")}
    assert {n for splits in ANSWER_TASKS.values() for n in splits.values()} <= names
    from hf_trajpe.data.registry import names as content_types

    assert {f"hf_trajpe_ppl_{t}" for t in content_types()} <= names
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["hf_trajpe.integrations"]
    shipped = {p.name for g in globs for p in TASKS_DIR.parent.glob(g)}
    assert shipped == {p.name for p in TASKS_DIR.iterdir() if p.is_file() and p.suffix != ".pyc"}


# -- the harness ---------------------------------------------------------------------------------


def test_harness_runs_a_patched_model_on_local_tasks(data):
    _lm_eval()
    from hf_trajpe.integrations import lm_eval as he

    model, tok = tiny_model("alibi")
    results = he.evaluate(model, tok, ["hf_trajpe_ppl_random_content", "hf_trajpe_counting", "hf_trajpe_passkey_1x"],
                          data, max_length=2048, batch_size=2)
    res = results["results"]
    assert 1.0 < res["hf_trajpe_ppl_random_content"]["byte_perplexity,none"] < 1e6
    assert res["hf_trajpe_counting"]["exact_match,none"] in (0.0, 1 / 3, 2 / 3, 1.0)
    table = he.table(results)
    assert table.splitlines()[0].startswith("|Tasks") and "hf_trajpe_passkey_1x" in table


@pytest.mark.parametrize("add_bos_token", [None, False], ids=["tokenizer-default", "no-special-tokens"])
def test_harness_perplexity_agrees_with_score_blocks(data, add_bos_token):
    """The harness's per-type byte perplexity equals hf_trajpe's score_blocks on the same tokens to 1e-5
    (measured 2e-7: float32 logits summed in another order, batches padded differently).

    What the harness scores: each document on its own, after its prefix token (the tokenizer's bos, else
    eos), one window when it fits ``max_length``; tokenized with the tokenizer's default special tokens
    unless ``add_bos_token=False``: the byte tokenizer then appends an eos, scored as well (0.6-0.9% of
    these perplexities). Byte tokens: byte perplexity = token perplexity."""
    _lm_eval()
    import torch

    from hf_trajpe.evaluation.scoring import score_blocks
    from hf_trajpe.integrations import lm_eval as he

    model, tok = tiny_model("trajectory")
    res = he.evaluate(model, tok, ["hf_trajpe_ppl"], data, max_length=4096, batch_size=3,
                      add_bos_token=add_bos_token)["results"]
    for ctype in TYPES:
        nll = n_bytes = 0.0
        for doc in read_jsonl(perplexity_path(data, ctype)):
            ids = [tok.eos_token_id, *tok(doc["text"], add_special_tokens=add_bos_token is None)["input_ids"]]
            nll += float(score_blocks(model, torch.tensor([ids]), mode="clm", batch_size=1).nll.sum())
            n_bytes += len(doc["text"].encode("utf-8"))
        ours = math.exp(nll / n_bytes)
        theirs = res[f"hf_trajpe_ppl_{ctype}"]["byte_perplexity,none"]
        assert theirs == pytest.approx(ours, rel=1e-5), ctype
        assert 300 < ours < 1e5  # sharp predictions (tests/integrations/tiny.py), not the uniform 259


def test_missing_data_folder_says_how_to_write_it(tmp_path):
    _lm_eval()
    from hf_trajpe.integrations import lm_eval as he

    with pytest.raises(FileNotFoundError, match="hf-trajpe lm-eval --write-data"):
        he.task_manager(tmp_path)
    model, tok = tiny_model("rope")
    with pytest.raises(ValueError, match="unknown local task"):
        he.evaluate(model, tok, ["wikitext"], tmp_path)


def test_command_line_patches_and_writes_the_table(tmp_path, capsys):
    _lm_eval()
    from hf_trajpe.cli import main

    model, _ = tiny_model("native")  # saved unpatched; the command patches it
    import hf_trajpe

    hf_trajpe.unpatch(model)
    model.save_pretrained(tmp_path / "m")
    out = tmp_path / "out"
    argv = ["lm-eval", "--model", str(tmp_path / "m"), "--tokenizer", "byte", "--encoding", "trajectory",
            "--option", "base=rope", "--option", "strength=0.2", "--tasks", "hf_trajpe_ppl", "hf_trajpe_flip_flop",
            "--types", "random_content", "--n-docs", "2", "--n-task", "2", "--max-length", "2048", "--out", str(out)]
    assert main(argv) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["meta"]["options"] == {"base": "rope", "strength": 0.2}
    assert set(saved["results"]) == {"hf_trajpe_ppl_random_content", "hf_trajpe_flip_flop"}
    assert "|hf_trajpe_flip_flop" in capsys.readouterr().out
    assert main([*argv[:9], "--option", "strenght=0.2", "--out", str(out)]) == 2
    assert "unknown patch option(s) ['strenght']" in capsys.readouterr().err
