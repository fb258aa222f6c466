"""CoPE (docs/spec.md, section 2.15): the attention against an independent NumPy reference, decoding with
the KV cache, padding, options, save/reload, gradients and refusals."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
from patch_models import CAUSAL, build, cached_logits, output, random_ids

import hf_trajpe
from hf_trajpe.patching import PatchConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from reference import cope_attention  # noqa: E402


def _patch(model, npos_max: int = 6, seed: int = 7, std: float = 1.0, **options):
    """A cope patch with random (non-zero) position vectors: at patch time they are zero."""
    handle = hf_trajpe.patch(model, "cope", npos_max=npos_max, **options)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in handle.state.scheme.vectors:
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return handle


def _left_padded(model, lengths=(12, 7), seed=3):
    pad = int(model.config.pad_token_id)
    n = max(lengths)
    ids = torch.full((len(lengths), n), pad)
    mask = torch.zeros(len(lengths), n, dtype=torch.long)
    for r, length in enumerate(lengths):
        ids[r, n - length:] = random_ids(length, seed=seed + r)[0]
        mask[r, n - length:] = 1
    return ids, mask


# -- (a) the attention against the NumPy reference ------------------------------------------------
@pytest.mark.parametrize("scale", ["unscaled", "sqrt_d"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", CAUSAL)
def test_attention_equals_numpy_reference(family, attn, scale, monkeypatch):
    """Record the inputs and output of every patched attention call (q/k/v as the attention function
    gets them: GPT-2 has no rotary, the rotary families get the identity rotation) and recompute the
    output from the paper's formulas: left-padded batch, GQA (the Llama family: 4 query heads on 2
    key/value heads), a scaling per layer (GPT-2), positions clamped at npos_max; the position logits
    as the paper's listing adds them (``unscaled``) or divided by sqrt(head width) as the reference
    repository does (``sqrt_d``)."""
    from transformers import AttentionInterface

    overrides = {"scale_attn_by_inverse_layer_idx": True} if family == "gpt2" else {}  # a scaling per layer
    model = build(family, attn, **overrides)
    handle = _patch(model, npos_max=5, position_logit_scale=scale)
    name = model.config._attn_implementation
    ours = AttentionInterface._global_mapping[name]
    calls = []

    def recording(module, query, key, value, attention_mask, **kwargs):
        out = ours(module, query, key, value, attention_mask, **kwargs)
        calls.append((module, query, key, value, kwargs.get("scaling"), out[0]))
        return out

    monkeypatch.setitem(AttentionInterface._global_mapping, name, recording)
    ids, mask = _left_padded(model)
    output(model, input_ids=ids, attention_mask=mask)
    assert len(calls) == handle.plan.attention_modules == 2
    vectors = handle.state.scheme.vectors
    for index, (module, q, k, v, scaling, got) in enumerate(calls):
        assert scaling == module.scaling
        for r in range(ids.shape[0]):
            real = mask[r].bool().numpy()
            head_width = q.shape[-1]
            want = cope_attention(q[r].numpy(), k[r].numpy(), v[r].numpy(), vectors[index].detach().numpy(),
                                  scaling, real, position_scale=1.0 if scale == "unscaled" else head_width ** -0.5)
            got_r = got[r].transpose(0, 1).double().numpy()  # [h, n, e]
            np.testing.assert_allclose(got_r[:, real], want[:, real], rtol=1e-4, atol=1e-5)
    handle.unpatch()


def test_reference_clamps_positions_and_skips_pad_keys():
    """The reference itself: with one learned position every score gets the same ``q_i.e[0]`` (the
    softmax does not move); a pad key adds no gate, so real tokens see what they see without it."""
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 2, 5, 4))
    vec = rng.normal(size=(4, 6))
    plain = cope_attention(q, k, v, np.zeros((4, 1)), 0.5)
    np.testing.assert_allclose(cope_attention(q, k, v, rng.normal(size=(4, 1)), 0.5), plain, rtol=1e-12, atol=1e-12)
    assert not np.allclose(cope_attention(q, k, v, vec, 0.5), plain)
    real = np.array([False, True, True, True, True])
    padded = cope_attention(q, k, v, vec, 0.5, real)
    np.testing.assert_allclose(padded[:, 1:], cope_attention(q[:, 1:], k[:, 1:], v[:, 1:], vec, 0.5), rtol=1e-12)
    assert not padded[:, 0].any()


# -- (b) KV cache -----------------------------------------------------------------------------------
@pytest.mark.parametrize("family,attn", [(f, "sdpa") for f in CAUSAL] + [("llama", "eager"), ("gpt2", "eager")])
def test_cached_decoding_equals_recomputation(family, attn):
    model = build(family, attn)
    ids, mask = _left_padded(model, lengths=(12, 9), seed=5)
    with _patch(model):
        full = output(model, input_ids=ids, attention_mask=mask)
        inc = cached_logits(model, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(inc[real], full[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", CAUSAL)
def test_greedy_generate_with_cache_equals_without(family):
    model = build(family)
    pad = int(model.config.pad_token_id)
    ids = random_ids(8, b=2, seed=6)
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = pad, 0
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=pad, eos_token_id=None,
              output_scores=True, return_dict_in_generate=True)
    with _patch(model):
        with_cache = model.generate(ids, use_cache=True, **kw)
        without = model.generate(ids, use_cache=False, **kw)
    assert torch.equal(with_cache.sequences, without.sequences)
    torch.testing.assert_close(torch.stack(with_cache.scores), torch.stack(without.scores), rtol=1e-4, atol=1e-4)


# -- (c) padding, implementations, the starting point ---------------------------------------------
@pytest.mark.parametrize("family", CAUSAL)
def test_left_padded_batch_equals_each_alone(family):
    model = build(family)
    ids, mask = _left_padded(model)
    n = ids.shape[1]
    with _patch(model):
        batch = output(model, input_ids=ids, attention_mask=mask)
        for r in range(ids.shape[0]):
            length = int(mask[r].sum())
            alone = output(model, input_ids=ids[r:r + 1, n - length:])
            torch.testing.assert_close(batch[r, n - length:], alone[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", CAUSAL)
def test_eager_and_sdpa_agree_and_unpatch_restores(family):
    ids = random_ids(20, b=2)
    outs = []
    for attn in ("eager", "sdpa"):
        model = build(family, attn)
        stock = output(model, input_ids=ids)
        keys = list(model.state_dict())
        with _patch(model):
            outs.append(output(model, input_ids=ids))
        torch.testing.assert_close(output(model, input_ids=ids), stock, rtol=0, atol=0)
        assert list(model.state_dict()) == keys and model.config._attn_implementation == attn
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", CAUSAL)
def test_fresh_patch_is_nope_and_vectors_move_it(family):
    """The vectors start at zero (the reference's init): no positional signal until trained."""
    model = build(family)
    ids = random_ids(20, b=2)
    with hf_trajpe.patch(model, "none"):
        nope = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "cope") as handle:
        assert handle.state.scheme.npos_max == 64
        torch.testing.assert_close(output(model, input_ids=ids), nope, rtol=1e-5, atol=1e-6)
    with _patch(model):
        assert not torch.allclose(output(model, input_ids=ids), nope, atol=1e-3)


# -- (d) options, save/reload, gradients -----------------------------------------------------------
def test_options_route_validate_and_save(tmp_path):
    config = PatchConfig.from_options("cope", npos_max=32, max_positions=100)
    defaults = {"npos_max": 64, "position_logit_scale": "unscaled"}  # the paper's listing: q.e(p) added as it is
    assert config.scheme_options == {**defaults, "npos_max": 32} and config.max_positions == 100
    assert PatchConfig("cope").scheme_options == defaults  # filled in, so a reload keeps it
    # a patch saved before position_logit_scale existed reloads with the behaviour it was trained with
    assert PatchConfig.from_dict({"encoding": "cope", "scheme_options": {"npos_max": 8}}).scheme_options == {
        **defaults, "npos_max": 8}
    with pytest.raises(ValueError, match="position_logit_scale .* 'unscaled', 'sqrt_d'"):
        PatchConfig.from_options("cope", position_logit_scale="sqrt")
    assert "scheme_options" not in PatchConfig("rope").to_dict()  # files of other encodings as before
    assert PatchConfig.from_dict({"encoding": "alibi"}) == PatchConfig("alibi")
    with pytest.raises(TypeError, match=r"supported options: .*max_positions.*options of cope: npos_max"):
        PatchConfig.from_options("cope", npos=3)
    # an option of another encoding is refused, whatever its value (the default included), naming who takes it
    for value in (3, 64):
        with pytest.raises(ValueError, match=r"option\(s\) npos_max apply only to encoding='cope', not 'rope'"):
            PatchConfig.from_options("rope", npos_max=value)
    for bad in (0, 2.5, True, 2**21):
        with pytest.raises(ValueError, match="npos_max"):
            PatchConfig("cope", scheme_options={"npos_max": bad})
    with pytest.raises(ValueError, match="npos_max apply only to encoding='cope', not 'sinusoidal'"):
        PatchConfig("sinusoidal", scheme_options={"npos_max": 3})
    with pytest.raises(ValueError, match="npos_max apply only to encoding='cope', not 'native'"):
        PatchConfig("native", scheme_options={"npos_max": 3})
    config.save(tmp_path)
    assert json.loads((tmp_path / "hf_trajpe_config.json").read_text())["scheme_options"] == {
        "npos_max": 32, "position_logit_scale": "unscaled"}
    assert PatchConfig.load(tmp_path) == config


def test_save_reload_is_exact_and_needs_the_state_file(tmp_path):
    model = build("llama")
    ids = random_ids(20, b=2)
    handle = _patch(model, npos_max=16)
    assert handle.plan.describe() == "cope (npos_max=16, position_logit_scale=unscaled)"
    want = output(model, input_ids=ids)
    model.save_pretrained(tmp_path)
    back = hf_trajpe.from_pretrained(tmp_path, dtype=torch.float32).eval()
    torch.testing.assert_close(output(back, input_ids=ids), want, rtol=0, atol=0)
    for a, b in zip(back.hf_trajpe.scheme.vectors, handle.state.scheme.vectors, strict=True):
        assert torch.equal(a, b) and a.shape == (16, 16)
    os.remove(tmp_path / "hf_trajpe_state.safetensors")
    with pytest.raises(FileNotFoundError, match="scheme.vectors.0"):
        hf_trajpe.from_pretrained(tmp_path)


@pytest.mark.parametrize("family", CAUSAL)
def test_gradients_reach_every_layer_vectors(family):
    model = build(family).train()
    handle = _patch(model, std=0.1)
    vectors = list(handle.state.scheme.vectors)
    assert all(any(p is v for p in model.parameters()) for v in vectors)
    ids = random_ids(12, b=2)
    model(input_ids=ids, labels=ids).loss.backward()
    for v in vectors:
        assert v.grad is not None and torch.isfinite(v.grad).all() and v.grad.abs().sum() > 0
    handle.unpatch()


def test_score_bias_gradients_match_finite_differences():
    """float64 gradcheck of the CoPE term in q and k: through the gates (the interpolation weight) and
    the position vectors read at the positions."""
    handle = _patch(build("llama"), npos_max=4)
    scheme = handle.state.scheme.double()
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 5, 16, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    assert torch.autograd.gradcheck(lambda q, k: scheme.score_bias(1, q, k, 0.25, allowed), (q, k))
    handle.unpatch()


# -- (e) refusals -------------------------------------------------------------------------------------
def test_refused_on_bidirectional_models_and_flex():
    with pytest.raises(ValueError, match="cope is defined for causal attention only; this .* model is bidirectional"):
        hf_trajpe.patch(build("bert"), "cope")
    model = build("llama", "flex_attention")
    with pytest.raises(NotImplementedError, match="eager, sdpa"):
        hf_trajpe.patch(model, "cope")
    assert "hf_trajpe" not in model._modules


def test_a_model_trained_before_position_logit_scale_counts_as_unscaled():
    """The study reuses a finished model only when its saved patch is what the config asks for: a CoPE
    patch saved without ``position_logit_scale`` was trained unscaled (the only behaviour then)."""
    from hf_trajpe.study.runs import same_patch

    saved = PatchConfig.from_options("cope", npos_max=256).to_dict()
    saved["scheme_options"] = {"npos_max": 256}  # as written before the option existed
    assert same_patch(saved, {"encoding": "cope", "npos_max": 256})
    assert same_patch(saved, {"encoding": "cope", "npos_max": 256, "position_logit_scale": "unscaled"})
    assert not same_patch(saved, {"encoding": "cope", "npos_max": 256, "position_logit_scale": "sqrt_d"})
    assert not same_patch(saved, {"encoding": "cope", "npos_max": 128})
