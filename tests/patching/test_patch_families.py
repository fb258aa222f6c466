"""Family x encoding correctness of hf_trajpe.patch on tiny random models (float32).

Every cell of the support table in docs/patching.md is exercised here: stock equivalence of
``native``, trajectory at strength 0 against its base, KV cache against recomputation (logits and
greedy generate), left padding against each sequence alone, eager against sdpa, unpatch.
"""

from __future__ import annotations

import pytest
import torch
from patch_models import (
    BIDIRECTIONAL,
    CAUSAL,
    FAMILIES,
    LEARNED,
    build,
    cached_logits,
    cell,
    cells_for,
    output,
    random_ids,
)

import hf_trajpe
from hf_trajpe.patching import adapter_for
from hf_trajpe.patching.families import StructureError

ALL_CELLS = [(f, c) for f in FAMILIES for c in cells_for(f)]
CAUSAL_CELLS = [(f, c) for f, c in ALL_CELLS if f in CAUSAL]


def _patch(model, name, **extra):
    enc, opts = cell(name)
    opts.update(extra)
    return hf_trajpe.patch(model, enc, **opts)


# -- support by structure ------------------------------------------------------------------------
#: what each family has, as its transformers code says (table path and offset, rotary path, causal)
STRUCTURE = {
    "gpt2": ("learned", "wpe", 0, None, True),
    "bert": ("learned", "embeddings.position_embeddings", 0, None, False),
    "roberta": ("learned", "embeddings.position_embeddings", 2, None, False),
    "llama": ("rope", None, 0, "rotary_emb", True),
    "mistral": ("rope", None, 0, "rotary_emb", True),
    "qwen2": ("rope", None, 0, "rotary_emb", True),
    "qwen3": ("rope", None, 0, "rotary_emb", True),
    "gpt_neox": ("rope", None, 0, "rotary_emb", True),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_adapter_is_found_from_the_structure(family):
    model = build(family)
    a = adapter_for(model)
    native, table, offset, rotary, causal = STRUCTURE[family]
    assert (a.native, a.table_path, a.table_offset(model.config), a.rotary_path, a.causal(model.config)) == (
        native, table, offset, rotary, causal)
    assert a.self_attention and all(name.endswith("Attention") for name in a.self_attention)
    assert {"native", "sinusoidal", "rope", "alibi", "none", "trajectory"} <= set(a.encodings)


def test_a_bert_decoder_is_causal():
    model = build("bert", is_decoder=True)
    assert adapter_for(model).causal(model.config)


def test_a_rotary_module_hf_trajpe_cannot_reproduce_is_refused():
    """The rotary module is called once: a layout other than Llama's half-split is refused, not guessed."""
    model = build("llama")
    rotary = model.model.rotary_emb
    stock = type(rotary).forward

    def interleaved(self, x, position_ids):
        cos, sin = stock(self, x, position_ids)
        half = cos.shape[-1] // 2
        return cos[..., :half].repeat_interleave(2, -1), sin[..., :half].repeat_interleave(2, -1)

    rotary.forward = interleaved.__get__(rotary)
    with pytest.raises(StructureError, match="half-split"):
        hf_trajpe.patch(model, "native")
    assert "hf_trajpe" not in model._modules


# -- native and strength 0 ------------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_native_gives_stock_logits(family, attn):
    model = build(family, attn)
    ids = random_ids(12, b=2)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # right padding: stock positions are right for real tokens
    stock = output(model, input_ids=ids, attention_mask=mask)
    stock_plain = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "native"):
        patched = output(model, input_ids=ids, attention_mask=mask)
        patched_plain = output(model, input_ids=ids)
    # bit for bit: native recomputes the stock positions with the stock arithmetic
    torch.testing.assert_close(patched_plain, stock_plain, rtol=0, atol=0)
    torch.testing.assert_close(patched[0], stock[0], rtol=0, atol=0)
    torch.testing.assert_close(patched[1, :9], stock[1, :9], rtol=0, atol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_trajectory_strength_zero_gives_base(family):
    model = build(family)
    ids = random_ids(12, b=2)
    bases = ["sinusoidal", "rope", "alibi"] + (["learned"] if family in LEARNED else [])
    for b in bases:
        enc = "native" if b == "learned" else b
        with hf_trajpe.patch(model, enc):
            want = output(model, input_ids=ids)
        with hf_trajpe.patch(model, "trajectory", base=b, strength=0.0):
            got = output(model, input_ids=ids)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        with hf_trajpe.patch(model, "trajectory", base=b, strength=0.5):
            moved = output(model, input_ids=ids)
        assert not torch.allclose(moved, want), f"trajectory on {b} did not move positions"


@pytest.mark.parametrize("family,name", ALL_CELLS)
def test_every_cell_runs_changes_and_unpatches(family, name):
    model = build(family)
    ids = random_ids(10, b=2)
    stock = output(model, input_ids=ids)
    keys = list(model.state_dict())
    handle = _patch(model, name)
    out = output(model, input_ids=ids)
    assert torch.isfinite(out).all()
    if name != "native" and not (name == "rope" and family not in LEARNED):
        assert not torch.allclose(out, stock), "the patch changed nothing"
    handle.unpatch()
    torch.testing.assert_close(output(model, input_ids=ids), stock, rtol=0, atol=0)
    assert list(model.state_dict()) == keys
    assert "hf_trajpe" not in model._modules
    assert not model.config._attn_implementation.startswith("hf_trajpe")


@pytest.mark.parametrize("family,name", ALL_CELLS)
def test_eager_and_sdpa_agree(family, name):
    ids = random_ids(10, b=2)
    outs = []
    for attn in ("eager", "sdpa"):
        model = build(family, attn)
        with _patch(model, name):
            outs.append(output(model, input_ids=ids))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)


# -- padding --------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,name", ALL_CELLS)
def test_left_padded_batch_equals_each_alone(family, name):
    model = build(family)
    pad = int(model.config.pad_token_id)
    seqs = [random_ids(11, seed=3)[0], random_ids(6, seed=4)[0]]
    n = max(len(s) for s in seqs)
    ids = torch.full((2, n), pad)
    mask = torch.zeros(2, n, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - len(s):] = s
        mask[i, n - len(s):] = 1
    with _patch(model, name):
        batch = output(model, input_ids=ids, attention_mask=mask)
        for i, s in enumerate(seqs):
            alone = output(model, input_ids=s[None])
            torch.testing.assert_close(batch[i, n - len(s):], alone[0], rtol=1e-4, atol=1e-5)


# -- KV cache -------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,name", CAUSAL_CELLS)
def test_cached_decoding_equals_recomputation(family, name):
    """Logits of token-by-token decoding with the cache equal one forward over the whole sequence,
    with a left-padded batch (trajectory continues from the cache, docs/spec.md, section 2.9)."""
    model = build(family)
    ids = random_ids(12, b=2, seed=5)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = int(model.config.pad_token_id)
    with _patch(model, name):
        full = output(model, input_ids=ids, attention_mask=mask)
        inc = cached_logits(model, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(inc[real], full[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family,name", CAUSAL_CELLS)
def test_greedy_generate_with_cache_equals_without(family, name):
    model = build(family)
    pad = int(model.config.pad_token_id)
    ids = random_ids(8, b=2, seed=6)
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = pad, 0
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=pad, eos_token_id=None,
              output_scores=True, return_dict_in_generate=True)
    with _patch(model, name):
        with_cache = model.generate(ids, use_cache=True, **kw)
        without = model.generate(ids, use_cache=False, **kw)
    assert torch.equal(with_cache.sequences, without.sequences)
    torch.testing.assert_close(torch.stack(with_cache.scores), torch.stack(without.scores), rtol=1e-4, atol=1e-4)


# -- ALiBi against an independent reference ------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_alibi_equals_stock_model_with_additive_bias_mask(family):
    """Reference: the stock model, its position table zeroed, with the ALiBi bias (+ causal -inf)
    passed as a 4D float attention mask: transformers' own code path, not ours."""
    from hf_trajpe.encodings import alibi_slopes

    model = build(family, "eager")
    ids = random_ids(9, b=1)
    with hf_trajpe.patch(model, "alibi"):
        got = output(model, input_ids=ids)
    n, h = ids.shape[1], model.config.num_attention_heads
    i = torch.arange(n, dtype=torch.float32)
    dist = i[:, None] - i[None, :]
    causal = family in CAUSAL
    bias = -alibi_slopes(h)[:, None, None] * (dist if causal else dist.abs())
    if causal:
        bias = bias.masked_fill(dist < 0, torch.finfo(torch.float32).min)
    pos = model.transformer.wpe if family == "gpt2" else model.bert.embeddings.position_embeddings
    with torch.no_grad():
        saved = pos.weight.clone()
        pos.weight.zero_()
        want = output(model, input_ids=ids, attention_mask=bias[None])
        pos.weight.copy_(saved)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# -- rope on a model without rotary against an independent reference ----------------------------
def test_rope_on_gpt2_equals_manual_rotation():
    """GPT-2 patched to ``rope``: compare with the stock model whose attention function rotates
    queries/keys by a NumPy-free hand formula (half-split, theta 10000)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model = build("gpt2", "sdpa")
    ids = random_ids(9, b=1)
    with hf_trajpe.patch(model, "rope"):
        got = output(model, input_ids=ids)

    def rotating(module, q, k, v, mask, **kw):
        d = q.shape[-1]
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        ang = torch.arange(q.shape[2]).float()[:, None] * inv[None]
        cos, sin = ang.cos().repeat(1, 2), ang.sin().repeat(1, 2)

        def rot(x):
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return x * cos + torch.cat((-x2, x1), -1) * sin

        return sdpa_attention_forward(module, rot(q), rot(k), v, mask, **kw)

    AttentionInterface.register("test_manual_rope", rotating)
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionMaskInterface.register("test_manual_rope", sdpa_mask)
    model.set_attn_implementation("test_manual_rope")
    with torch.no_grad():
        saved = model.transformer.wpe.weight.clone()
        model.transformer.wpe.weight.zero_()
        want = output(model, input_ids=ids)
        model.transformer.wpe.weight.copy_(saved)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# -- gradients ------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,base", [("gpt2", "learned"), ("llama", "rope"), ("llama", "alibi"),
                                         ("bert", "sinusoidal"), ("gpt_neox", "rope")])
def test_gradients_reach_embeddings_and_learnable_strength(family, base):
    model = build(family).train()
    handle = hf_trajpe.patch(model, "trajectory", base=base, strength=0.3, learnable_strength=True)
    ids = random_ids(10, b=2)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    raw = handle.state.strength.raw
    assert raw.grad is not None and torch.isfinite(raw.grad) and raw.grad.abs() > 0
    emb = model.get_input_embeddings().weight
    assert emb.grad is not None and emb.grad.abs().sum() > 0
    assert any(p is raw for p in model.parameters()), "the learnable strength must be a model parameter"


def test_trajectory_gradient_flows_through_positions_into_embeddings():
    """With detach=False the embedding gradient has an extra path through the steps."""
    grads = []
    for detach in (False, True):
        model = build("llama").train()
        hf_trajpe.patch(model, "trajectory", strength=0.5, detach=detach)
        ids = random_ids(10, b=1)
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append(model.get_input_embeddings().weight.grad.clone())
    assert not torch.allclose(grads[0], grads[1])


# -- position limit -------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_only_the_learned_table_limits_positions_by_default(family):
    """max_positions means the same on every family: by default only a learned table has an end; given,
    it limits every encoding alike."""
    model = build(family)
    rows = model.config.max_position_embeddings
    ids = random_ids(rows + 16, b=1)
    with pytest.raises((IndexError, RuntimeError)):
        output(model, input_ids=ids)  # stock: the table has no such rows
    with hf_trajpe.patch(model, "native"), pytest.raises(ValueError, match="position limit is 64"):
        output(model, input_ids=ids)
    for enc in ("rope", "alibi", "sinusoidal", "none"):
        with hf_trajpe.patch(model, enc):
            out = output(model, input_ids=ids)
        assert out.shape[1] == rows + 16 and torch.isfinite(out).all()
        with hf_trajpe.patch(model, enc, max_positions=rows), pytest.raises(ValueError, match="max_positions"):
            output(model, input_ids=ids)
    with hf_trajpe.patch(model, "native", max_positions=8), pytest.raises(ValueError, match="position limit is 8"):
        output(model, input_ids=random_ids(9, b=1))
    with hf_trajpe.patch(model, "trajectory", base="rope"):
        assert torch.isfinite(output(model, input_ids=ids)).all()
    with pytest.raises(ValueError, match="learned table"):
        hf_trajpe.patch(model, "trajectory", base="learned", max_positions=4 * rows)


@pytest.mark.parametrize("family", BIDIRECTIONAL)
def test_bidirectional_alibi_is_symmetric(family):
    """Reversing a sequence reverses a bidirectional ALiBi model's outputs only if |i-j| is used."""
    model = build(family)
    ids = random_ids(8, b=1)
    with hf_trajpe.patch(model, "alibi"):
        fwd = output(model, input_ids=ids)
        rev = output(model, input_ids=ids.flip(1))
    torch.testing.assert_close(fwd, rev.flip(1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family,name", [("gpt2", "trajectory"), ("llama", "trajectory"),
                                         ("llama", "trajectory/alibi"), ("gpt_neox", "alibi")])
def test_beam_search_with_cache_equals_without(family, name):
    """Beam search reorders cache rows; the trajectory memory must follow them."""
    model = build(family)
    ids = random_ids(7, b=2, seed=8)
    kw = dict(max_new_tokens=5, num_beams=3, do_sample=False, pad_token_id=0, eos_token_id=None,
              output_scores=True, return_dict_in_generate=True)
    with _patch(model, name):
        a = model.generate(ids, use_cache=True, **kw)
        b = model.generate(ids, use_cache=False, **kw)
    assert torch.equal(a.sequences, b.sequences)
    torch.testing.assert_close(a.sequences_scores, b.sequences_scores, rtol=1e-4, atol=1e-4)
