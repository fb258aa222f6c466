"""Long-context evaluation: windows of position, the chunked loss, passkey prompts, and the command on a tiny
model with context extensions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T

from hf_trajpe.evaluation.long_context import (
    long_documents,
    passkey_prompt,
    passkey_retrieval,
    perplexity_by_window,
    token_nll,
)


def _tiny_llama(max_positions: int = 64):
    cfg = T.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                        bos_token_id=1, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


def test_the_chunked_loss_equals_the_loss_of_full_logits():
    model = _tiny_llama()
    ids = torch.randint(3, 259, (150,))
    with torch.no_grad():
        logits = model(input_ids=ids[None]).logits[0, :-1]
    want = torch.nn.functional.cross_entropy(logits, ids[1:], reduction="none").double()
    got = token_nll(model, ids, chunk=16)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_windows_pool_the_right_tokens_and_the_interval_covers_the_estimate():
    # two documents of 40 tokens (39 losses), trained length 16: windows 0-1x (tokens 0..15), 1-1.5x (16..23),
    # 1.5-2x (24..31), 2-3x cut at 40 (32..39)
    nll = [torch.arange(39, dtype=torch.float64) / 10, torch.full((39,), 1.0, dtype=torch.float64)]
    windows = perplexity_by_window(nll, trained=16, n_resamples=200)
    assert [(w.start, w.stop) for w in windows] == [(0, 16), (16, 24), (24, 32), (32, 40)]
    assert windows[-1].label == "2-2.5x"  # the last window stops at the document's end
    first = np.concatenate([nll[0][0:15].numpy(), nll[1][0:15].numpy()])  # the tokens at positions 1..15
    assert windows[0].ppl == pytest.approx(math.exp(first.mean()))
    second = np.concatenate([nll[0][15:23].numpy(), nll[1][15:23].numpy()])
    assert windows[1].ppl == pytest.approx(math.exp(second.mean())) and windows[1].tokens == 16
    for w in windows:
        assert w.ci[0] <= w.ppl <= w.ci[1] and w.documents == 2
    assert windows[0].ci[0] < windows[0].ci[1], "two different documents: the interval has a width"


def test_passkey_prompts_hold_the_key_at_the_asked_depth_and_length():
    from hf_trajpe.data import byte_tokenizer

    tok = byte_tokenizer()
    for depth in (0.0, 0.5, 1.0):
        ids = passkey_prompt(tok, 2000, depth, "40213")
        text = tok.decode(ids)
        assert 1900 <= ids.numel() <= 2000
        assert text.endswith("What is the pass key? The pass key is") and text.count("40213") == 2
        where = text.index("40213") / len(text)
        assert abs(where - depth) < 0.1, (depth, where)
    with pytest.raises(ValueError, match=r"depth must be in \[0, 1\]"):
        passkey_prompt(tok, 100, 1.5, "12345")


def test_passkey_retrieval_scores_the_first_five_digits():
    from hf_trajpe.data import byte_tokenizer

    class Echo(torch.nn.Module):
        """A 'model' whose greedy answer is the key it was shown."""

        def parameters(self):
            yield torch.zeros(1)

        def generate(self, ids, **_):
            text = tok.decode(ids[0])
            key = text.split("The pass key is ")[1][:5]
            return torch.cat([ids, tok(" " + key, add_special_tokens=False, return_tensors="pt")["input_ids"]], 1)

    tok = byte_tokenizer()
    result = passkey_retrieval(Echo(), tok, [300], [0.2, 0.8], trials=2)
    assert [(r.depth, r.right, r.trials) for r in result] == [(0.2, 2, 2), (0.8, 2, 2)]


def test_long_documents_are_whole_test_files_of_the_length_asked():
    from hf_trajpe.data import byte_tokenizer

    docs = long_documents(byte_tokenizer(), "stdlib", 3000, 2)
    assert len(docs) == 2 and all(d["ids"].numel() == 3000 and d["source"].startswith("stdlib:") for d in docs)
    from hf_trajpe.data.real_text import split_of

    assert all(split_of(d["source"].split(":", 1)[1]) == "test" for d in docs)


def test_the_command_evaluates_a_model_and_its_extensions(tmp_path, capsys):
    from hf_trajpe.cli import main

    model = _tiny_llama(max_positions=64)
    model.save_pretrained(tmp_path / "tiny")
    yarn = json.dumps({"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2}})
    argv = ["eval", "--long-context", "160", "--model", "stock=tmp_path/tiny", "--model", "yarn=tmp_path/tiny",
            "--patch", f"yarn={yarn}", "--tokenizer", "byte", "--kinds", "stdlib", "license",
            "--documents", "2", "--passkey-lengths", "120", "--passkey-depths", "0.5", "--bootstrap", "100",
            "--no-progress", "--out", str(tmp_path / "out")]
    argv = [a.replace("tmp_path", str(tmp_path)) for a in argv]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| stock |" in out and "| yarn |" in out and "Passkey retrieval" in out
    report = json.loads((tmp_path / "out" / "long_context.json").read_text())
    assert report["trained_length"] == 64
    stock, ext = (report["models"][n]["windows"]["all"] for n in ("stock", "yarn"))
    assert [w["label"] for w in stock] == ["0-1x", "1-1.5x", "1.5-2x", "2-2.5x"]
    assert stock[0]["ppl"] != ext[0]["ppl"], "yarn changes the frequencies inside the window too"
    assert set(report["documents"]) == {"stdlib", "license"}
    assert report["split"] == "test"
    assert all(report["models"][n]["cpu_seconds"] >= 0 for n in ("stock", "yarn"))  # recorded, not a speed
    assert "CPU seconds of each model's reads" in (tmp_path / "out" / "long_context.md").read_text()
    assert (tmp_path / "out" / "ppl_by_window.png").read_bytes()[:4] == b"\x89PNG"


def test_the_validation_split_reads_other_files_than_the_test_split(tmp_path):
    """Settings are chosen on validation documents; the reported test documents must be others."""
    from hf_trajpe.evaluation.long_context_run import evaluate_long_context

    model = _tiny_llama(max_positions=64)
    model.save_pretrained(tmp_path / "tiny")
    runs = {split: evaluate_long_context({"stock": str(tmp_path / "tiny")}, tokenizer="byte", length=96,
                                         kinds=["stdlib"], documents=1, split=split, n_resamples=50,
                                         progress=False)
            for split in ("validation", "test")}
    from hf_trajpe.data.real_text import split_of

    for split, report in runs.items():
        assert report["split"] == split
        assert [split_of(s.split(":", 1)[1]) for s in report["documents"]["stdlib"]] == [split]
    assert runs["validation"]["documents"] != runs["test"]["documents"]


def test_the_command_checks_its_arguments_before_loading(tmp_path, capsys):
    from hf_trajpe.cli import main

    _tiny_llama().save_pretrained(tmp_path / "tiny")
    base = ["eval", "--long-context", "160", "--model", f"a={tmp_path / 'tiny'}", "--out", str(tmp_path / "o")]
    assert main([*base, "--patch", "b={}"]) == 2
    assert "--patch names b, which no --model has" in capsys.readouterr().err
    assert main([*base, "--patch", "a={not json"]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main([*base, "--patch", 'a={"encoding": "rope", "rope_parameters": {"rope_type": "yarn"}}']) == 2
    assert "needs factor" in capsys.readouterr().err
    # trajectory's strength on the model's own encoding would evaluate the stock model: refused, at its default too
    assert main([*base, "--patch", 'a={"strength": 0.2}']) == 2
    assert "option(s) strength apply only to encoding='trajectory', not 'native'" in capsys.readouterr().err
    assert main([*base, "--kinds", "poems"]) == 2
    assert "unknown poems" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "docs" / "results").rglob(
    "long_context.json")), ids=lambda p: p.parent.name)
def test_the_published_long_context_reports_render_again_from_their_json(path, tmp_path):
    from hf_trajpe.evaluation.long_context_run import write_long_context_report

    written = write_long_context_report(json.loads(path.read_text()), tmp_path)["md"].read_text()
    assert written == (path.parent / "long_context.md").read_text()
