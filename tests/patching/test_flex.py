"""flex_attention on patched models (hf_trajpe/patching/flex.py; docs/patching.md, FlexAttention).

ALiBi and trajectory on ALiBi reach flex as a ``score_mod`` over per-token positions; causality and padding
as a block mask built at bucketed lengths. The fast tests run flex unfused (``flex.COMPILE = False``: no
compile, same semantics); the compiled path, which costs seconds per shape bucket on CPU, is ``slow``.
Everything is compared with the eager path; errors fail the tests.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from patch_models import build, output, random_ids

import hf_trajpe
from hf_trajpe.compat import cache_kwarg, output_cache
from hf_trajpe.encodings.alibi import alibi_bias, alibi_slopes
from hf_trajpe.patching import flex

ALIBI_CELLS = [("alibi", {}), ("trajectory", {"base": "alibi", "strength": 0.5})]


@pytest.fixture
def unfused(monkeypatch):
    monkeypatch.setattr(flex, "COMPILE", False)


def _padded(model, b: int = 2, n: int = 10, left: bool = True):
    """``b`` rows of ``n`` tokens, the second with three pad tokens (left for causal models, else right)."""
    ids = random_ids(n, b=b, seed=4)
    mask = torch.ones_like(ids)
    if b > 1:
        cols = slice(0, 3) if left else slice(n - 3, n)
        ids[1, cols], mask[1, cols] = int(model.config.pad_token_id), 0
    return ids, mask


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# -- the score_mod itself ---------------------------------------------------------------------------
def test_buckets():
    assert [flex.bucket(n) for n in (1, 2, 16, 17, 100, 128, 129, 1024, 1025, 3000)] == \
        [1, 16, 16, 32, 128, 128, 256, 1024, 2048, 3072]


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_score_mod_equals_the_dense_bias_and_its_gradients(causal):
    """Fractional positions, batch 2, a decoding-like query block (keys before the queries): the unfused flex
    output and the gradients into the positions equal softmax attention with ``alibi_bias``. q/k/v need no
    grad (torch refuses them on CPU); the positions do."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    g = torch.Generator().manual_seed(0)
    b, h, n, t, d = 2, 4, 5, 9, 8
    q, k, v = (torch.randn(b, h, m, d, generator=g) for m in (n, t, t))
    k_pos = torch.cumsum(torch.rand(b, t, generator=g) * 1.5 + 0.2, dim=1).requires_grad_()
    q_pos = (k_pos.detach()[:, t - n:] + 0.0).requires_grad_()
    slopes = alibi_slopes(h)
    off = t - n

    def allowed(bi, hi, qi, ki):
        return (qi + off >= ki) if causal else (ki >= 0)

    mask = create_block_mask(allowed, b, None, n, t, device="cpu")
    got = _quiet(flex_attention, q, k, v, score_mod=flex.alibi_score_mod(slopes, q_pos, k_pos, causal),
                 block_mask=mask)
    scores = q @ k.transpose(-1, -2) * d ** -0.5 + alibi_bias(slopes, q_pos, k_pos, causal=causal)
    if causal:
        scores = scores.masked_fill(torch.arange(n)[:, None] + off < torch.arange(t), float("-inf"))
    want = scores.softmax(-1) @ v
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    weights = torch.randn(want.shape, generator=g)
    grads = torch.autograd.grad((got * weights).sum(), (q_pos, k_pos))
    ref = torch.autograd.grad((want * weights).sum(), (q_pos, k_pos))
    # causal: a query's own position shifts its whole row, which softmax ignores (zero gradient)
    assert ref[1].abs().max() > 1e-3 and (causal or ref[0].abs().max() > 1e-3)
    for a, r in zip(grads, ref, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6)


# -- patched models, unfused flex -------------------------------------------------------------------
@pytest.mark.parametrize("family,enc,opts", [
    (f, e, o) for f in ("llama", "gpt_neox", "bert", "roberta") for e, o in ALIBI_CELLS
] + [("bert", "rope", {})])
def test_patched_flex_equals_eager(unfused, family, enc, opts):
    """Batch 2 with padding (left on causal models, right on bidirectional ones): real tokens equal the
    eager path; ``rope`` on BERT rotates q/k inside attention."""
    flex_model, eager = build(family, "flex_attention"), build(family, "eager")
    ids, mask = _padded(eager, left=eager.config.model_type not in ("bert", "roberta"))
    with hf_trajpe.patch(flex_model, enc, **opts), hf_trajpe.patch(eager, enc, **opts):
        got = _quiet(output, flex_model, input_ids=ids, attention_mask=mask)
        want = output(eager, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)


def test_a_bias_scheme_without_a_score_mod_is_read_densely(unfused, monkeypatch):
    """The fallback for bias schemes that register no positional score_mod: the dense bias, read per score."""
    monkeypatch.setattr(flex, "_SCORE_MODS", {})
    flex_model, eager = build("llama", "flex_attention"), build("llama", "eager")
    ids, mask = _padded(eager)
    with hf_trajpe.patch(flex_model, "alibi"), hf_trajpe.patch(eager, "alibi"):
        got = _quiet(output, flex_model, input_ids=ids, attention_mask=mask)
        want = output(eager, input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("enc,opts", ALIBI_CELLS)
def test_cached_decoding_equals_recomputation(unfused, enc, opts):
    """Token by token with the KV cache (one query per step, the keys' positions from the cache) equals one
    forward over the left-padded batch."""
    model = build("llama", "flex_attention")
    ids, mask = _padded(model, n=12)
    with hf_trajpe.patch(model, enc, **opts):
        full = _quiet(output, model, input_ids=ids, attention_mask=mask)
        steps = []
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = model(input_ids=ids[:, :6], attention_mask=mask[:, :6], use_cache=True)
            steps.append(out.logits)
            for i in range(6, 12):
                out = model(input_ids=ids[:, i:i + 1], attention_mask=mask[:, :i + 1],
                            **{cache_kwarg(): output_cache(out)}, use_cache=True)
                steps.append(out.logits)
    real = mask.bool()
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("enc,opts", ALIBI_CELLS)
def test_generate_with_cache_equals_without_and_sdpa(unfused, enc, opts):
    flex_model, sdpa = build("llama", "flex_attention"), build("llama", "sdpa")
    ids, mask = _padded(sdpa, n=8)
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None,
              output_scores=True, return_dict_in_generate=True)
    with hf_trajpe.patch(flex_model, enc, **opts), hf_trajpe.patch(sdpa, enc, **opts):
        cached = _quiet(flex_model.generate, ids, use_cache=True, **kw)
        recomputed = _quiet(flex_model.generate, ids, use_cache=False, **kw)
        reference = _quiet(sdpa.generate, ids, use_cache=True, **kw)
    assert torch.equal(cached.sequences, recomputed.sequences)
    assert torch.equal(cached.sequences, reference.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(recomputed.scores), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(reference.scores), rtol=1e-5, atol=1e-5)


def test_gradients_reach_the_strength_as_in_eager(unfused):
    """A one-layer Llama with frozen weights, so q/k/v need no grad (CPU flex has no backward for them): the
    learnable strength gets the gradient it gets through the eager path, through the positions in score_mod."""
    grads = []
    for attn in ("flex_attention", "eager"):
        model = build("llama", attn, num_hidden_layers=1).requires_grad_(False)
        ids, mask = _padded(model)
        handle = hf_trajpe.patch(model, "trajectory", base="alibi", strength=0.3, learnable_strength=True)
        raw = model.hf_trajpe.strength.raw
        logits = _quiet(model, input_ids=ids, attention_mask=mask).logits
        (logits[mask.bool()] ** 2).mean().backward()
        grads.append(raw.grad.clone())
        handle.unpatch()
    assert grads[1].abs().max() > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)


def test_cpu_training_forward_is_refused_with_what_to_do(unfused):
    model = build("llama", "flex_attention").train()
    ids, mask = _padded(model)
    with hf_trajpe.patch(model, "trajectory", base="alibi"):
        with pytest.raises(NotImplementedError, match=r"no backward on CPU.*torch.no_grad\(\).*'sdpa'"):
            model(input_ids=ids, attention_mask=mask)
        with torch.no_grad():  # the same model forwards fine without grad
            assert torch.isfinite(_quiet(model, input_ids=ids, attention_mask=mask).logits).all()


def test_cope_is_refused_on_flex_with_the_reason_and_what_to_do():
    model = build("llama", "flex_attention")
    with pytest.raises(NotImplementedError, match=r"cumulative sums.*attn_implementation='eager' or 'sdpa'"):
        hf_trajpe.patch(model, "cope")
    assert "hf_trajpe" not in model._modules


def test_unpatched_model_on_our_implementation_equals_stock(unfused):
    """A model loaded with ``hf_trajpe_flex`` but not patched goes through the bucketed mask and flex without
    a score_mod: the stock outputs."""
    hf_trajpe.register_attention()
    ours, sdpa = build("llama", "hf_trajpe_flex"), build("llama", "sdpa")
    ids, mask = _padded(sdpa)
    real = mask.bool()
    torch.testing.assert_close(_quiet(output, ours, input_ids=ids, attention_mask=mask)[real],
                               output(sdpa, input_ids=ids, attention_mask=mask)[real], rtol=1e-5, atol=1e-5)


# -- compiled (slow: seconds per shape bucket on CPU) ------------------------------------------------
def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@pytest.mark.slow
def test_compiled_flex_equals_eager_and_compiles_once_per_bucket():
    """Compiled flex at batch 1 and 2 (left padding) equals the eager path; lengths 5, 9 and 13 share the
    bucket 16 (one compile), 20 adds the bucket 32, and a second model reuses them. About 30-60 s on 2 CPU
    cores, most of it compiling."""
    import torch._dynamo

    torch._dynamo.reset()
    flex_model, eager = build("llama", "flex_attention"), build("llama", "eager")
    compiles = []
    with hf_trajpe.patch(flex_model, "trajectory", base="alibi", strength=0.5), \
            hf_trajpe.patch(eager, "trajectory", base="alibi", strength=0.5):
        for b, n in ((1, 5), (2, 5), (2, 9), (2, 13), (2, 20), (2, 17)):
            before = _graphs()
            ids, mask = _padded(eager, b=b, n=n)
            got = _quiet(output, flex_model, input_ids=ids, attention_mask=mask)
            real = mask.bool()
            torch.testing.assert_close(got[real], output(eager, input_ids=ids, attention_mask=mask)[real],
                                       rtol=1e-5, atol=1e-5, msg=lambda m, s=(b, n): f"batch x length {s}: {m}")
            compiles.append(_graphs() - before)
    assert compiles == [1, 1, 0, 0, 1, 0], compiles
    other = build("llama", "flex_attention", seed=1)
    before = _graphs()
    with hf_trajpe.patch(other, "alibi"):
        _quiet(output, other, input_ids=random_ids(11, b=2))
    assert _graphs() - before == 1  # plain ALiBi: another score_mod, one compile for its bucket


@pytest.mark.slow
def test_compiled_generate_with_cache_equals_without():
    """Greedy generate with the KV cache on compiled flex equals sdpa (tokens and scores): three compiles, the
    prompt (2 x 16 x 16 after bucketing) and the decoding steps (one query; keys bucketed 16, then 32).
    About 1-2 minutes on 2 CPU cores."""
    import torch._dynamo

    torch._dynamo.reset()
    flex_model, sdpa = build("llama", "flex_attention"), build("llama", "sdpa")
    ids, mask = _padded(sdpa, n=8)
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None,
              output_scores=True, return_dict_in_generate=True)
    with hf_trajpe.patch(flex_model, "trajectory", base="alibi", strength=0.5), \
            hf_trajpe.patch(sdpa, "trajectory", base="alibi", strength=0.5):
        before = _graphs()
        cached = _quiet(flex_model.generate, ids, use_cache=True, **kw)
        compiles = _graphs() - before
        reference = _quiet(sdpa.generate, ids, use_cache=True, **kw)
    assert compiles == 3, compiles
    assert torch.equal(cached.sequences, reference.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(reference.scores), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_torch_cpu_dynamic_flex_with_a_captured_tensor_still_fails_to_build():
    """Why flex.py compiles static shapes: torch's CPU kernel with dynamic sizes does not build when score_mod
    reads a captured tensor at batch > 1 (a torch bug, no hf_trajpe involved). When this starts passing, torch
    has fixed it and dynamic shapes could replace the buckets."""
    import torch._dynamo
    from torch._inductor.exc import InductorError
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.reset()
    b, h, n, d = 2, 4, 8, 16
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    pos = torch.arange(n, dtype=torch.float32).expand(b, n).contiguous()
    mask = create_block_mask(lambda bi, hi, qi, ki: qi >= ki, b, None, n, n, device="cpu")
    with pytest.raises(InductorError, match=r"cur_kvSplitSize\d*\W? was not declared"):
        torch.compile(flex_attention, dynamic=True)(
            q, k, v, block_mask=mask, score_mod=lambda s, bi, hi, qi, ki: s + pos[bi, ki] - pos[bi, qi])
    torch._dynamo.reset()
