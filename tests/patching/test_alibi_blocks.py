"""Causal ALiBi as one more query/key dimension (patching/key_bias.py) instead of a ``[b, h, n, t]`` float
mask: the same attention and the same gradients (into q, k, v and the positions) as the full bias, SDPA
keeps its causal kernel, and the paths that cannot factor the bias (bidirectional, decoding steps, 16-bit
dtypes) keep the float mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from patch_models import build, random_ids

import hf_trajpe
from hf_trajpe.compat import cache_kwarg, output_cache
from hf_trajpe.encodings.alibi import alibi_slopes
from hf_trajpe.patching.key_bias import augmented_qkv, centred_key_term


def _attention_inputs(dtype: torch.dtype, b: int = 2, h: int = 4, g: int = 2, n: int = 6, d: int = 8):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, n, d, generator=gen, dtype=dtype)
    k, v = (torch.randn(b, g, n, d, generator=gen, dtype=dtype) for _ in range(2))
    pos = (torch.rand(b, n, generator=gen, dtype=dtype) * 3).cumsum(1)  # fractional, increasing
    allowed = torch.ones(n, n, dtype=torch.bool).tril()[None, None].repeat(b, 1, 1, 1)
    if b > 1:
        allowed[1, :, :, :2] = False  # row 1: two left pads
        allowed[1, :, :2, 0] = True  # (pad queries see one key, so no row is empty)
    return q, k, v, pos, allowed


def _full_bias(q, k, v, pos, allowed):
    """The reference: the whole ALiBi bias -m_h (p_i - p_j) in one float mask; GQA by repeating k/v."""
    h, g = q.shape[1], k.shape[1]
    m = alibi_slopes(h).to(pos.dtype)
    bias = -m[None, :, None, None] * (pos[:, None, :, None] - pos[:, None, None, :])  # (alibi_bias is float32)
    mask = bias.masked_fill(~allowed, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(q, k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1),
                                          attn_mask=mask, scale=0.3)


def _key_term(q, k, v, pos, allowed):
    h, g = q.shape[1], k.shape[1]
    q2, k2, v2 = augmented_qkv(q, k, v, alibi_slopes(h).to(pos.dtype), centred_key_term(pos), 0.3)
    out = F.scaled_dot_product_attention(q2, k2.repeat_interleave(h // g, 1), v2.repeat_interleave(h // g, 1),
                                         attn_mask=allowed, scale=0.3)
    assert torch.equal(out[..., -1], torch.zeros_like(out[..., -1]))  # v's extra column is zero
    return out[..., :-1]


def test_key_term_equals_the_full_bias_with_gradients():
    args = [t.requires_grad_() for t in _attention_inputs(torch.float64)[:4]]
    allowed = _attention_inputs(torch.float64)[4]
    weight = torch.randn(_full_bias(*args, allowed).shape, dtype=torch.float64)
    grads = []
    for fn in (_full_bias, _key_term):
        out = fn(*args, allowed)
        grads.append((out, torch.autograd.grad((out * weight).sum(), args)))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-12, atol=1e-12)
    for a, b in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert grads[1][1][3].abs().sum() > 0  # the positions get a gradient


def test_gradcheck_into_keys_and_positions():
    q, k, v, pos, allowed = _attention_inputs(torch.float64, b=1, h=2, g=1, n=4, d=4)
    assert torch.autograd.gradcheck(lambda k, p: _key_term(q, k, v, p, allowed[:1]),
                                    (k.requires_grad_(), pos.requires_grad_()))


def _sdpa_calls(monkeypatch) -> list[tuple[int, bool, bool]]:
    """Record (head width, a mask was given, is_causal) of every SDPA call."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, *args, is_causal=False, **kwargs):
        calls.append((q.shape[-1], attn_mask is not None, bool(is_causal)))
        return real(q, k, v, attn_mask, *args, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_causal_alibi_keeps_the_fused_causal_kernel_and_the_results(monkeypatch, family):
    """No padding: SDPA gets no mask and is_causal (head width + 1); logits and the gradient of a
    learnable strength equal eager attention, which adds the whole bias to its scores."""
    ids = random_ids(12, b=2)
    results = {}
    for attn in ("eager", "sdpa"):
        model = build(family, attn).train()
        handle = hf_trajpe.patch(model, "trajectory", base="alibi", strength=0.5, learnable_strength=True)
        calls = _sdpa_calls(monkeypatch) if attn == "sdpa" else []
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        monkeypatch.undo()
        results[attn] = (out.logits.detach(), handle.state.strength.raw.grad.clone())
        if attn == "sdpa":
            head = model.config.hidden_size // model.config.num_attention_heads
            assert calls and all(c == (head + 1, False, True) for c in calls), calls
    torch.testing.assert_close(results["sdpa"][0], results["eager"][0], rtol=1e-5, atol=1e-5)
    assert results["eager"][1].abs() > 0
    torch.testing.assert_close(results["sdpa"][1], results["eager"][1], rtol=1e-3, atol=1e-8)


def test_decoding_steps_and_left_padding():
    """Cached decoding steps (a bias row, float mask) equal one forward over the whole sequence (key
    term); a left-padded row equals that sequence alone."""
    model = build("llama", "sdpa")
    hf_trajpe.patch(model, "trajectory", base="alibi", strength=0.5)
    ids = random_ids(14, b=2)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits
        out = model(input_ids=ids[:, :10], attention_mask=mask[:, :10], use_cache=True)
        steps = []
        for i in range(10, 14):
            out = model(input_ids=ids[:, i:i + 1], attention_mask=mask[:, :i + 1],
                        **{cache_kwarg(): output_cache(out)}, use_cache=True)
            steps.append(out.logits[:, -1])
        alone = model(input_ids=ids[1:, 3:]).logits
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 10:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone[0], full[1, 3:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["bidirectional", "bfloat16", "decoding"])
def test_the_float_mask_stays_where_the_bias_does_not_factor(monkeypatch, case):
    family = "bert" if case == "bidirectional" else "llama"
    model = build(family, "sdpa")
    if case == "bfloat16":
        model = model.to(torch.bfloat16)
    hf_trajpe.patch(model, "alibi")
    ids = random_ids(8, b=1)
    with torch.no_grad():
        past = output_cache(model(input_ids=ids, use_cache=True)) if case == "decoding" else None
        calls = _sdpa_calls(monkeypatch)
        model(input_ids=ids[:, :1] if past is not None else ids, **{cache_kwarg(): past})
    head = model.config.hidden_size // model.config.num_attention_heads
    assert calls and all(c == (head, True, False) for c in calls), calls
