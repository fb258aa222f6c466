"""ALiBi attention without subnormal intermediates (patching/subnormals.py): the power-of-two scaling
changes no result, and the products the attention kernel forms from the tiny weights of far keys are
normal floats with it and subnormal without it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from patch_models import build, random_ids

import hf_trajpe
import hf_trajpe.patching.attention as attention
from hf_trajpe.patching.subnormals import GRAD_SCALE, VALUE_SCALE, narrow, scale, subnormal_scales, widen

TINY = torch.finfo(torch.float32).tiny


def _no_scaling(monkeypatch) -> None:
    monkeypatch.setattr(attention, "subnormal_scales", lambda query: (1.0, 1.0))


def test_scales_only_float32_on_the_cpu_with_several_queries():
    assert subnormal_scales(torch.zeros(1, 2, 3, 4)) == (VALUE_SCALE, GRAD_SCALE)
    assert subnormal_scales(torch.zeros(1, 2, 1, 4)) == (1.0, 1.0)  # a decoding step
    assert subnormal_scales(torch.zeros(1, 2, 3, 4, dtype=torch.float64)) == (1.0, 1.0)
    assert subnormal_scales(torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16)) == (1.0, 1.0)


def test_widen_narrow_and_scale_gradients():
    """The true derivative when both scales agree (gradcheck); the backward scale alone otherwise."""
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    extra = torch.randn(2, 1, 4, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, e: widen(x, e), (x, extra))
    assert torch.autograd.gradcheck(lambda x: narrow(x, 3, 0.5, 0.5), (x,))
    assert torch.autograd.gradcheck(lambda x: scale(x, 8.0, 8.0), (x,))
    assert torch.equal(widen(x, extra, 2.0), torch.cat((x * 2.0, extra.expand(2, 3, 4, 1)), -1))
    gx, ge = torch.autograd.grad(widen(x, extra, 2.0, 0.25).sum(), (x, extra))
    assert torch.equal(gx, torch.full_like(x, 0.25)) and torch.equal(ge, torch.full_like(extra, 0.75))
    (g,) = torch.autograd.grad(narrow(x, 3, 1.0, 4.0).sum(), x)
    assert torch.equal(g, torch.cat((torch.full((2, 3, 4, 3), 4.0), torch.zeros(2, 3, 4, 2)), -1).double())
    (g,) = torch.autograd.grad(scale(x, 1.0, 4.0).sum(), x)
    assert torch.equal(g, torch.full_like(x, 4.0))


@pytest.mark.parametrize("family,base", [("gpt2", "alibi"), ("llama", "trajectory"), ("bert", "trajectory")])
def test_the_scaling_changes_no_logit_and_no_gradient(monkeypatch, family, base):
    """Bit for bit, a training step with left padding: causal ALiBi (key term) and bidirectional (float mask)."""
    ids = random_ids(16, b=2)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    results = []
    for scaled in (True, False):
        if not scaled:
            _no_scaling(monkeypatch)
        model = build(family, "sdpa").train()
        opts = {"base": "alibi", "strength": 0.5} if base == "trajectory" else {}
        hf_trajpe.patch(model, base, **opts)
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
        out.loss.backward()
        results.append((out.logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    assert torch.equal(results[0][0], results[1][0])
    assert len(results[0][1]) == len(results[1][1])
    for a, b in zip(results[0][1], results[1][1], strict=True):
        assert torch.equal(a, b)


def _kernel_inputs(monkeypatch, scaled: bool):
    """One training step of a GPT-2 with ALiBi at 160 tokens (12 heads: the steepest slope, 2**(-2/3), takes
    far keys past the -87 where the kernel's weights end); per SDPA call the q/k/v it got and the gradient
    of its output (what the fused kernel computes its backward from)."""
    if not scaled:
        _no_scaling(monkeypatch)
    calls, grads = [], []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, *args, **kwargs):
        out = real(q, k, v, attn_mask, *args, **kwargs)
        calls.append((q.detach(), k.detach(), v.detach(), kwargs.get("scale")))
        out.register_hook(lambda g: grads.append(g.detach()))
        return out

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model = build("gpt2", "sdpa", n_positions=160, n_embd=96, n_head=12).train()
    hf_trajpe.patch(model, "alibi")
    ids = random_ids(160, b=1)
    model(input_ids=ids, labels=ids).loss.backward()
    monkeypatch.undo()
    return list(zip(calls, reversed(grads), strict=True))


def _subnormal_products(calls) -> tuple[int, int]:
    """``(P * v, dS = P * (dP - D))`` products below FLT_MIN: the kernel's arithmetic redone in full
    (weights below FLT_MIN are 0, as the fused kernel's exp gives)."""
    pv = ds = 0
    for (q, k, v, s), g in calls:
        n = q.shape[2]
        scores = (q @ k.transpose(-1, -2)) * s
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        x = scores - scores.amax(-1, keepdim=True)
        p = torch.where(x < torch.log(torch.tensor(TINY)), 0.0, x.exp())
        p = p / p.sum(-1, keepdim=True)
        p = torch.where(p < TINY, 0.0, p)
        dp = g @ v.transpose(-1, -2)
        d = (dp * p).sum(-1, keepdim=True)
        products = p[..., None] * v[:, :, None, :, :-1]  # [b, h, n, t, d]: every P_ij v_jc
        pv += int(((products != 0) & (products.abs() < TINY)).sum())
        dS = p * (dp - d)
        ds += int(((dS != 0) & (dS.abs() < TINY)).sum())
    return pv, ds


def test_the_kernel_forms_no_subnormal_products(monkeypatch):
    plain = _subnormal_products(_kernel_inputs(monkeypatch, scaled=False))
    assert plain[1] > 0  # without the scaling the backward computes subnormals
    assert _subnormal_products(_kernel_inputs(monkeypatch, scaled=True)) == (0, 0)
