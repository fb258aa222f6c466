"""RULER end to end: the runner on a tiny Llama and on a model that knows the answers, the report files,
paired comparisons on the same prompts, and the command line."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as T

from hf_trajpe.data import byte_tokenizer
from hf_trajpe.evaluation.ruler import make_samples, run_ruler, summarize, write_ruler_report

PLAN = {"tasks": ["niah_single_1", "fwe"], "lengths": [600, 900], "samples": 2,
        "haystacks": ["noise", "dialogue_structure"]}


def _tiny_llama(max_positions: int = 512):
    cfg = T.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                        bos_token_id=1, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


class Oracle(torch.nn.Module):
    """Answers every prompt it was told the answers of: what a perfect long-context model would write."""

    def __init__(self, tok, samples):
        super().__init__()
        self.tok, self.weight = tok, torch.nn.Parameter(torch.zeros(1))
        self.answers = {s.prompt: " " + ", ".join(s.answers) + "." for s in samples}

    def generate(self, ids, attention_mask, max_new_tokens, do_sample, pad_token_id, stopping_criteria=None):
        assert not do_sample and attention_mask.shape == ids.shape and ids.shape[0] == 1
        prompt = self.tok.decode(ids[0], skip_special_tokens=True)
        new = self.tok(self.answers[prompt], add_special_tokens=False)["input_ids"][:max_new_tokens]
        return torch.cat([ids, torch.tensor([new], dtype=ids.dtype)], dim=1)


@pytest.fixture(scope="module")
def runs():
    tok = byte_tokenizer()
    prompts = make_samples(tok, PLAN["tasks"], PLAN["lengths"], PLAN["samples"], PLAN["haystacks"], seed=0)
    tiny = run_ruler(_tiny_llama(), tok, **PLAN, seed=0, method="tiny", progress=False)
    oracle = run_ruler(Oracle(tok, prompts), tok, prompts=prompts, method="oracle", progress=False)
    return tok, prompts, tiny, oracle


def test_generation_stops_once_the_answer_scores_full_marks():
    """The early stop keeps the score of the full budget: the stopped text is a prefix of the full one that
    already holds every reference, for fewer generated tokens (a reference the model writes early is taken from
    its own full continuation)."""
    from hf_trajpe.evaluation.ruler.runner import generate_answer_counted
    from hf_trajpe.evaluation.ruler.scoring import postprocess_pred, sample_score

    tok, model = byte_tokenizer(), _tiny_llama()
    prompt = make_samples(tok, ["niah_single_1"], [400], 1, ["noise"], seed=0)[0].prompt
    full, n_full = generate_answer_counted(model, tok, prompt, 40)
    reference = postprocess_pred(full)[:6]
    assert reference.strip() and n_full == 40
    stopped, n_stopped = generate_answer_counted(model, tok, prompt, 40, "string_match_all", [reference])
    assert full.startswith(stopped) and n_stopped < n_full
    assert sample_score("string_match_all", stopped, [reference]) == sample_score("string_match_all", full,
                                                                                  [reference]) == 1.0
    never, n_never = generate_answer_counted(model, tok, prompt, 40, "string_match_all", ["\u2603 not written"])
    assert never == full and n_never == n_full


def test_the_runner_scores_every_prompt_of_the_plan(runs):
    _, prompts, tiny, _ = runs
    assert len(prompts) == (2 + 1) * 2 * 2  # niah on two haystacks, fwe on its own; two lengths; two samples
    assert len(tiny.rows) == len(prompts)
    assert {(r["task"], r["haystack"]) for r in tiny.rows} == {("niah_single_1", "noise"),
                                                               ("niah_single_1", "dialogue_structure"), ("fwe", "own")}
    assert all(0.0 <= r["score"] <= 1.0 and r["cpu_seconds"] >= 0 for r in tiny.rows)
    assert {r["max_new_tokens"] for r in tiny.rows} == {128, 50}
    assert all(1 <= r["generated_tokens"] <= r["max_new_tokens"] for r in tiny.rows)
    assert tiny.meta["lengths"] == [600, 900] and tiny.meta["methods"] == ["tiny"]


def test_a_model_that_writes_the_answers_scores_one_and_wins_the_paired_test(runs):
    _, _, tiny, oracle = runs
    assert [r["score"] for r in oracle.rows] == [1.0] * len(oracle.rows)
    assert [(r["task"], r["index"], r["length"]) for r in oracle.rows] == \
        [(r["task"], r["index"], r["length"]) for r in tiny.rows], "the same prompts, in the same order"
    both = {"meta": {"methods": ["tiny", "oracle"]}, "rows": tiny.rows + oracle.rows}
    summary = summarize(both, n_resamples=200)
    overall = next(c for c in summary["comparisons"] if c["length"] == "all")
    losses_of_tiny = sum(r["score"] < 1.0 for r in tiny.rows)
    assert overall["wins"] == losses_of_tiny > 0 and overall["losses"] == 0
    assert overall["p_value"] == pytest.approx(min(1.0, 2 * 0.5 ** losses_of_tiny))
    for cell in summary["by_length"]:
        assert cell["ci"][0] <= cell["score"] <= cell["ci"][1]


def test_the_report_is_written_as_json_markdown_and_png(runs, tmp_path):
    _, _, tiny, oracle = runs
    table = type(tiny)(rows=list(tiny.rows), meta=dict(tiny.meta, methods=["tiny"])).extend(oracle)
    paths = write_ruler_report(table, tmp_path, baseline="oracle", n_resamples=200)
    data = json.loads(paths["json"].read_text())
    assert len(data["rows"]) == 24 and data["summary"]["effective_length"]["baseline"] == "oracle"
    assert data["summary"]["effective_length"]["methods"]["oracle"]["length"] == 900
    md = paths["md"].read_text()
    for text in ("## Score by length", "## Effective length", "## Paired against the baseline", "## By task",
                 "## By haystack", "| oracle | niah_single_1 | dialogue_structure | 1.00 [0.16, 1.00]"):
        assert text in md
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_command_runs_ruler_on_a_model_and_its_patch(tmp_path, capsys):
    from hf_trajpe.cli import main

    _tiny_llama(max_positions=256).save_pretrained(tmp_path / "tiny")
    yarn = json.dumps({"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2}})
    argv = ["eval", "--long-context", "1500", "--ruler", "--ruler-lengths", "1200", "1500", "--quick",
            "--tasks", "niah_single_1", "vt", "--samples", "1", "--model", f"stock={tmp_path / 'tiny'}",
            "--model", f"yarn={tmp_path / 'tiny'}", "--patch", f"yarn={yarn}", "--tokenizer", "byte",
            "--bootstrap", "100", "--no-progress", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "# RULER" in out and "| yarn |" in out
    data = json.loads((tmp_path / "out" / "ruler.json").read_text())
    assert data["meta"]["methods"] == ["stock", "yarn"] and data["meta"]["haystacks"] == ["noise"]
    assert {r["task"] for r in data["rows"]} == {"niah_single_1", "vt"} and len(data["rows"]) == 2 * 2 * 2
    assert (tmp_path / "out" / "ruler_vs_length.png").is_file()

    # a rerun with the same --out takes every saved row and generates nothing; a cut last line is dropped
    rows_file = tmp_path / "out" / "ruler_rows.jsonl"
    lines = rows_file.read_text().splitlines()
    assert json.loads(lines[0])["header"]["methods"]["yarn"]["patch"]["rope_parameters"]["factor"] == 2
    assert len(lines) == 1 + 8
    rows_file.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # interrupted while writing the last row
    import hf_trajpe.evaluation.ruler.runner as runner

    calls = []
    real = runner.generate_answer_counted
    runner_generate = lambda *a, **k: calls.append(1) or real(*a, **k)  # noqa: E731
    try:
        runner.generate_answer_counted = runner_generate
        with pytest.warns(RuntimeWarning, match="ruler_rows.jsonl, line 9: a last line cut short by an interrupted"):
            assert main(argv) == 0
    finally:
        runner.generate_answer_counted = real
    assert len(calls) == 1, "only the row cut short is generated again"
    again = json.loads((tmp_path / "out" / "ruler.json").read_text())
    assert [r["score"] for r in again["rows"]] == [r["score"] for r in data["rows"]]
    assert len(rows_file.read_text().splitlines()) == 1 + 8

    # the same --out with another patch under a saved method's name is refused, the file untouched
    before = rows_file.read_text()
    other = argv[:argv.index("--patch") + 1] + ['yarn={"encoding": "rope"}'] + argv[argv.index("--patch") + 2:]
    assert main(other) == 2
    assert "holds rows of another run (method yarn" in capsys.readouterr().err
    assert rows_file.read_text() == before


@pytest.mark.parametrize(("argv", "message"), [
    (["--ruler"], "--ruler runs with --long-context LENGTH"),
    (["--long-context", "600", "--tasks", "vt"], "--tasks apply to the RULER suite; add --ruler"),
    (["--long-context", "600", "--ruler", "--tasks", "nope"], "unknown RULER task(s) nope; known: niah_single_1"),
    (["--long-context", "600", "--ruler", "--haystacks", "essay"], "unknown haystack(s) essay; known: noise"),
    (["--long-context", "600", "--ruler", "--reference-length", "512"], "--reference-length 512 is not among"),
])
def test_the_command_refuses_wrong_ruler_options(tmp_path, capsys, argv, message):
    from hf_trajpe.cli import main

    _tiny_llama().save_pretrained(tmp_path / "tiny")
    assert main(["eval", *argv, "--model", f"a={tmp_path / 'tiny'}", "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
