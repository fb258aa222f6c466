"""RoPE inside attention (models without a rotary module) as one autograd function (patching/rotation.py):
the same values as ``apply_rotary``, correct gradients into q/k and into the positions, and no copy of the
unrotated q/k kept for the backward."""

from __future__ import annotations

import pytest
import torch
from patch_models import build, random_ids

import hf_trajpe
from hf_trajpe.encodings.rotary import apply_rotary, rotary_cos_sin, rotary_inv_freq
from hf_trajpe.patching import rotation
from hf_trajpe.patching.rotation import rotate


def _inputs(dtype: torch.dtype, b: int = 2, h: int = 3, n: int = 5, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, h, n, d, generator=g, dtype=dtype)
    pos = (torch.rand(b, n, generator=g, dtype=dtype) * 20).cumsum(1)  # fractional, as trajectory gives
    return x, pos


def test_forward_is_bit_identical_to_apply_rotary():
    x, pos = _inputs(torch.float32, n=40, d=64)
    cos, sin = rotary_cos_sin(pos, 64, dtype=torch.float32)
    plain = apply_rotary(x, x, cos, sin)[0]
    assert torch.equal(rotate(x, cos, sin), plain)
    assert torch.equal(rotate(x.requires_grad_(), cos.requires_grad_(), sin), plain)


def test_gradcheck_into_queries_and_positions():
    """float64, q and the positions requiring grad (cos/sin built from them, as with trajectory)."""
    x, pos = _inputs(torch.float64)
    inv = rotary_inv_freq(8).double()

    def fn(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        freqs = pos[..., None] * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return rotate(x, emb.cos(), emb.sin())

    assert torch.autograd.gradcheck(fn, (x.requires_grad_(), pos.requires_grad_()))


def test_gradcheck_with_cos_sin_that_are_not_a_rotation():
    """An interpolated table's cos^2 + sin^2 is not 1, and its halves need not match: the backward
    recovers the input by solving each 2 x 2 map, not by rotating back."""
    x, _ = _inputs(torch.float64)
    g = torch.Generator().manual_seed(3)
    cos = (torch.rand(2, 5, 8, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    sin = (torch.rand(2, 5, 8, generator=g, dtype=torch.float64) - 0.5).requires_grad_()
    assert torch.autograd.gradcheck(rotate, (x.requires_grad_(), cos, sin))
    # cos/sin shared by the batch (batch 1, broadcast)
    assert torch.autograd.gradcheck(rotate, (x, cos[:1].detach().requires_grad_(), sin[:1].detach().requires_grad_()))


@pytest.mark.parametrize("positions_need_grad", [False, True])
def test_gradients_equal_the_plain_implementation(positions_need_grad):
    x, pos = _inputs(torch.float32, n=30, d=32)
    weight = torch.randn_like(x)
    grads = []
    for fn in (rotate, lambda x, c, s: apply_rotary(x, x, c, s)[0]):
        xx, pp = x.clone().requires_grad_(), pos.clone().requires_grad_(positions_need_grad)
        cos, sin = rotary_cos_sin(pp, 32, dtype=torch.float32)
        (fn(xx, cos, sin) * weight).sum().backward()
        grads.append((xx.grad, pp.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-6, atol=1e-6)
    if positions_need_grad:
        torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-4, atol=1e-4)


def _saved_storages(fn) -> set[int]:
    """Data pointers of every tensor autograd saves while ``fn`` runs."""
    ptrs: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptrs.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return ptrs


def test_the_backward_keeps_no_copy_of_the_unrotated_input():
    x, pos = _inputs(torch.float32)
    x.requires_grad_()
    pos.requires_grad_()
    cos, sin = rotary_cos_sin(pos, 8, dtype=torch.float32)
    out = []
    saved = _saved_storages(lambda: out.append(rotate(x, cos, sin)))
    allowed = {t.untyped_storage().data_ptr() for t in (cos, sin, out[0])}
    assert saved <= allowed and x.untyped_storage().data_ptr() not in saved
    plain = _saved_storages(lambda: apply_rotary(x, x, cos, sin))  # what the function replaces
    assert x.untyped_storage().data_ptr() in plain


def test_patched_gpt2_trains_as_with_the_plain_rotation(monkeypatch):
    """trajectory/rope on GPT-2 (no rotary module: the rotation happens in attention) with a learnable
    strength: the loss and the gradients of strength and embeddings equal those of apply_rotary."""
    ids = random_ids(12, b=2)
    results = []
    for plain in (False, True):
        if plain:
            monkeypatch.setattr(rotation, "rotate", lambda x, c, s, *_: apply_rotary(x, x, c, s)[0])
        model = build("gpt2").train()
        handle = hf_trajpe.patch(model, "trajectory", base="rope", strength=0.5, learnable_strength=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), handle.state.strength.raw.grad.clone(),
                        model.get_input_embeddings().weight.grad.clone()))
    assert torch.equal(results[0][0], results[1][0])
    assert results[0][1].abs() > 0
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(results[0][2], results[1][2], rtol=1e-4, atol=1e-6)


def test_the_inference_rotation_equals_the_autograd_one_bit_for_bit():
    """Without autograd, rotate() uses roll and a signed sin (four ops): the same floats as Rotate."""
    from hf_trajpe.patching.rotation import Rotate

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 5, 8, generator=gen)
    x[0, 0, 0, :4] = 0.0  # zeros keep their sign
    positions = torch.tensor([[0.0, 1.0, 2.5, 7.25, 100.0]] * 2)
    cos, sin = rotary_cos_sin(positions, 8)
    with torch.no_grad():
        fast = rotate(x, cos, sin)
    assert torch.equal(fast, Rotate.apply(x, cos, sin))
    assert torch.equal(torch.signbit(fast), torch.signbit(Rotate.apply(x, cos, sin)))
