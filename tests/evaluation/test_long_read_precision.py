"""Long reads in bfloat16 and through chunked prefill: the same losses as one float32 forward, within what each
changes (none for the grouping beyond float rounding; a stated tolerance for bfloat16), for the stock model and
its patches; and ``auto`` chooses from a measurement, saying what it measured."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as T

import hf_trajpe.precision as precision
from hf_trajpe.evaluation.long_context import token_nll
from hf_trajpe.patching import patch

#: mean next-token loss of a bfloat16 read against float32, in nats: bfloat16 keeps 8 bits of mantissa, and on
#: these tiny random models the mean moves by about 1e-3 (SmolLM2's figure is in docs/benchmarks.md)
BF16_MEAN_NLL_TOLERANCE = 0.02

PATCHES = {"stock": None, "yarn": {"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2.0}},
           "trajectory": {"encoding": "trajectory", "strength": 0.2}, "alibi": {"encoding": "alibi"}}


def _llama():
    cfg = T.LlamaConfig(vocab_size=259, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                        bos_token_id=1, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


def _gpt2():
    cfg = T.GPT2Config(vocab_size=259, n_embd=64, n_layer=2, n_head=4, n_positions=256, bos_token_id=1,
                       eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return T.GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


@pytest.mark.parametrize("name", PATCHES)
def test_chunked_prefill_gives_the_losses_of_one_forward(name):
    model, ids = _llama(), torch.randint(3, 259, (200,), generator=torch.Generator().manual_seed(1))
    options = dict(PATCHES[name] or {})
    handle = patch(model, options.pop("encoding"), **options) if options or PATCHES[name] else None
    try:
        whole = token_nll(model, ids)
        for step in (37, 64, 199, 500):
            torch.testing.assert_close(token_nll(model, ids, prefill_chunk=step), whole, rtol=1e-5, atol=1e-5)
    finally:
        if handle is not None:
            handle.unpatch()


def test_chunked_prefill_on_a_learned_table_model():
    model, ids = _gpt2(), torch.randint(3, 259, (150,), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(token_nll(model, ids, prefill_chunk=40), token_nll(model, ids), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", PATCHES)
def test_a_bfloat16_read_stays_within_the_stated_tolerance_of_float32(name):
    ids = torch.randint(3, 259, (160,), generator=torch.Generator().manual_seed(3))
    means = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = _llama().to(dtype)
        options = dict(PATCHES[name] or {})
        handle = patch(model, options.pop("encoding"), **options) if PATCHES[name] else None
        means[dtype] = token_nll(model, ids).mean().item()
        if handle is not None:
            handle.unpatch()
    assert means[torch.float32] != means[torch.bfloat16], "the bfloat16 read must really run in bfloat16"
    assert abs(means[torch.bfloat16] - means[torch.float32]) < BF16_MEAN_NLL_TOLERANCE


def test_dtype_names_and_auto(monkeypatch):
    assert precision.resolve_dtype("float32")[0] is torch.float32
    assert precision.resolve_dtype(torch.bfloat16)[0] is torch.bfloat16
    with pytest.raises(ValueError, match="'float16' is not one of float32, bfloat16, auto"):
        precision.resolve_dtype("float16")
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda: 3.0)
    dtype, info = precision.resolve_dtype("auto")
    assert dtype is torch.bfloat16 and info["speedup"] == 3.0 and "3.00x" in info["reason"]
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda: 0.8)
    dtype, info = precision.resolve_dtype("auto")
    assert dtype is torch.float32 and "below" in info["reason"]


def test_the_calibration_measures_a_ratio_once_per_process():
    speedup = precision.bfloat16_speedup(tokens=128, width=64, heads=4, repeats=1)
    assert 0.0 < speedup < float("inf")
    assert precision.bfloat16_speedup(tokens=128, width=64, heads=4, repeats=1) == speedup  # cached, not re-timed


def test_the_command_reads_in_the_asked_type_and_says_so(tmp_path, capsys):
    from hf_trajpe.cli import main

    _llama().save_pretrained(tmp_path / "tiny")
    argv = ["eval", "--long-context", "160", "--model", f"stock={tmp_path / 'tiny'}", "--tokenizer", "byte",
            "--kinds", "stdlib", "--documents", "1", "--bootstrap", "50", "--no-progress", "--dtype", "bfloat16",
            "--prefill-chunk", "64", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    assert "read in bfloat16 (as requested)" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "long_context.json").read_text())
    assert report["precision"]["dtype"] == "bfloat16" and report["prefill_chunk"] == 64
