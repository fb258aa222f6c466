"""The hand-written family overrides (hf_trajpe/patching/families/gptj.py, bloom.py, mpt.py) on tiny random
models (float32): positions that live in the model's own code (GPT-J's sin/cos buffers, BLOOM's and MPT's
built-in ALiBi) are computed from the patch state.

Checked: ``native`` (and ``alibi`` on BLOOM/MPT) is the stock model bit for bit; trajectory at strength 0
is its base bit for bit; every layer's attention probabilities equal a float64 computation from the
formulas (GPT-J's interleaved rotation of the first ``rotary_dim`` dimensions, the ALiBi slopes of the
paper and of MPT) at the state's fractional positions; cached decoding equals recomputation; a
left-padded row equals the sequence alone; ``unpatch`` leaves nothing behind. BLOOM and MPT have 6 heads,
so their slopes take the rules for a head count that is not a power of two.
"""

from __future__ import annotations

import math

import pytest
import torch
from patch_models import cached_logits

import hf_trajpe
from hf_trajpe.patching import adapter_for
from hf_trajpe.patching.families import OverrideAdapter

VOCAB = 128
PAD = 0
FAMILIES = ("gptj", "bloom", "mpt")
ALIBI = ("bloom", "mpt")
#: every encoding each override carries (trajectory once per base), as the plan lists them
ENCODINGS = {
    "gptj": ("native", "sinusoidal", "rope", "none", "trajectory"),
    "bloom": ("native", "sinusoidal", "alibi", "none", "trajectory"),
    "mpt": ("native", "sinusoidal", "alibi", "none", "trajectory"),
}
BASES = {"gptj": ("sinusoidal", "rope"), "bloom": ("sinusoidal", "alibi"), "mpt": ("sinusoidal", "alibi")}


def build(family: str, seed: int = 0):
    """2 layers; GPT-J 4 heads of 16 with rotary_dim 8 (a partial rotation); BLOOM and MPT 6 heads of 8.
    Weights larger than the default init, so that positions move the attention visibly."""
    import transformers as T

    common = dict(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=1, eos_token_id=2, initializer_range=0.2)
    if family == "gptj":
        cfg = T.GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64, n_inner=128,
                           attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, **common)
        cls = T.GPTJForCausalLM
    elif family == "bloom":
        cfg = T.BloomConfig(hidden_size=48, n_layer=2, n_head=6, hidden_dropout=0.0, attention_dropout=0.0, **common)
        cls = T.BloomForCausalLM
    else:
        cfg = T.MptConfig(d_model=48, n_heads=6, n_layers=2, max_seq_len=64, expansion_ratio=2, **common)
        cls = T.MptForCausalLM
    torch.manual_seed(seed)
    return cls(cfg).eval()


@pytest.fixture(scope="module")
def models():
    return {f: build(f) for f in FAMILIES}


def ids_of(n: int, b: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (b, n), generator=torch.Generator().manual_seed(seed))


def left_padded(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    seqs = [ids_of(11, 1, seed)[0], ids_of(6, 1, seed + 1)[0]]
    n = max(len(s) for s in seqs)
    ids = torch.full((2, n), PAD)
    mask = torch.zeros(2, n, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - len(s):], mask[i, n - len(s):] = s, 1
    return ids, mask, seqs


def logits(model, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(**kwargs).logits


# -- the override is found, and refuses what it does not carry ---------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_the_override_is_used_and_lists_its_encodings(models, family):
    adapter = adapter_for(models[family])
    assert isinstance(adapter, OverrideAdapter)
    assert adapter.encodings == ENCODINGS[family]
    assert adapter.trajectory_bases == BASES[family]
    assert adapter.native == ("rope" if family == "gptj" else "alibi")


@pytest.mark.parametrize("family,encoding", [("gptj", "alibi"), ("gptj", "cope"), ("bloom", "rope"), ("mpt", "cope")])
def test_what_an_override_does_not_carry_is_refused(models, family, encoding):
    with pytest.raises(ValueError, match="supported: native"):
        hf_trajpe.patch(models[family], encoding)


@pytest.mark.parametrize("family,base", [("gptj", "alibi"), ("bloom", "rope"), ("mpt", "learned")])
def test_a_base_an_override_does_not_carry_is_refused(models, family, base):
    with pytest.raises(ValueError, match="supported bases"):
        hf_trajpe.patch(models[family], "trajectory", base=base)


# -- stock equivalence ---------------------------------------------------------------------------------
@pytest.mark.parametrize("family,encoding", [(f, "native") for f in FAMILIES] + [(f, "alibi") for f in ALIBI]
                         + [("gptj", "rope")])
def test_the_models_own_scheme_is_the_stock_model_exactly(models, family, encoding):
    """Batch 2 without padding, and left-padded (GPT-J given rank position_ids, as generate() passes them).
    Stock MPT places pads too (positions are key indices): its padded rows are equal up to the softmax's
    shift invariance only."""
    model = models[family]
    pids, mask, _ = left_padded()
    padded = dict(input_ids=pids, attention_mask=mask)
    if family == "gptj":
        padded["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
    calls = [dict(input_ids=ids_of(10)), padded]
    stock = [logits(model, **kw) for kw in calls]
    with hf_trajpe.patch(model, encoding):
        patched = [logits(model, **kw) for kw in calls]
    assert torch.equal(patched[0], stock[0])
    if family == "mpt":
        real = mask.bool()
        torch.testing.assert_close(patched[1][real], stock[1][real], rtol=1e-4, atol=1e-5)
    else:
        assert torch.equal(patched[1], stock[1])


@pytest.mark.parametrize("family", FAMILIES)
def test_trajectory_at_strength_zero_is_its_base_and_moves_at_half(models, family):
    model = models[family]
    ids = ids_of(12)
    for base in BASES[family]:
        with hf_trajpe.patch(model, base):
            want = logits(model, input_ids=ids)
        with hf_trajpe.patch(model, "trajectory", base=base, strength=0.0):
            assert torch.equal(logits(model, input_ids=ids), want)
        with hf_trajpe.patch(model, "trajectory", base=base, strength=0.5):
            assert (logits(model, input_ids=ids) - want).abs().max() > 1e-4


# -- the positions reach the rotation / the bias: a float64 reference --------------------------------------
def paper_slopes(n: int) -> list[float]:
    """ALiBi slopes of Press et al. (their reference code), float64: a power of two ``H`` gives
    ``2^(-8k/H)``; otherwise the nearest lower power of two, then every other slope of the next one."""
    def power_of_two(h: int) -> list[float]:
        return [2.0 ** (-8.0 * k / h) for k in range(1, h + 1)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    low = 2 ** math.floor(math.log2(n))
    return power_of_two(low) + paper_slopes(2 * low)[0::2][: n - low]


def mpt_slopes(n: int, alibi_bias_max: float = 8.0) -> list[float]:
    """MPT's slopes, float64: ``2^(-alibi_bias_max * k / H)`` over the next power of two ``H``; when ``n`` is
    not one, the even-numbered slopes first, then the odd ones, cut at ``n``."""
    h = 2 ** math.ceil(math.log2(n))
    m = [2.0 ** (-alibi_bias_max * k / h) for k in range(1, h + 1)]
    return m if h == n else (m[1::2] + m[0::2])[:n]


def gptj_rotate(x: torch.Tensor, p: torch.Tensor, rot: int) -> torch.Tensor:
    """GPT-J's rotation, float64: ``x`` ``[b, n, h, e]``, positions ``p`` ``[b, n]``; dimensions ``2k, 2k+1``
    of the first ``rot`` turn by ``p * 10000^(-2k/rot)``, the rest pass."""
    theta = 10000.0 ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    angle = p[:, :, None, None] * theta
    cos, sin = angle.cos(), angle.sin()
    even, odd = x[..., 0:rot:2], x[..., 1:rot:2]
    out = x.clone()
    out[..., 0:rot:2] = even * cos - odd * sin
    out[..., 1:rot:2] = odd * cos + even * sin
    return out


def _capture(modules: list[torch.nn.Module]) -> tuple[list, list]:
    seen: list = []
    handles = [m.register_forward_hook(lambda mod, args, out: seen.append(out.detach().double())) for m in modules]
    return seen, handles


def reference_probabilities(family: str, model, projections: list[torch.Tensor], positions: torch.Tensor | None,
                            mask: torch.Tensor) -> torch.Tensor:
    """Attention probabilities ``[b, h, n, n]`` of one layer in float64, from its projections and the
    positions (``None``: no positional signal)."""
    cfg = model.config
    b, n = mask.shape
    h = cfg.num_attention_heads
    e = cfg.hidden_size // h
    if family == "gptj":
        q, k = (t.view(b, n, h, e) for t in projections[:2])
        if positions is not None:
            q, k = gptj_rotate(q, positions, cfg.rotary_dim), gptj_rotate(k, positions, cfg.rotary_dim)
        scores = torch.einsum("bihe,bjhe->bhij", q, k) / math.sqrt(e)
    else:
        if family == "bloom":
            fused = projections[0].view(b, n, h, 3, e)
            q, k = fused[..., 0, :], fused[..., 1, :]
            slopes = paper_slopes(h)
        else:
            q, k, _ = (t.reshape(b, n, h, e) for t in projections[0].chunk(3, dim=2))
            slopes = mpt_slopes(h)
        scores = torch.einsum("bihe,bjhe->bhij", q, k) / math.sqrt(e)
        if positions is not None:  # causal ALiBi: -m (p_i - p_j)
            m = torch.tensor(slopes, dtype=torch.float64)[None, :, None, None]
            scores = scores - m * (positions[:, None, :, None] - positions[:, None, None, :])
    allowed = torch.ones(n, n, dtype=torch.bool).tril()[None, None] & mask.bool()[:, None, None, :]
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1)


def _layer_projections(family: str, model) -> list[list[torch.nn.Module]]:
    base = model.base_model
    if family == "gptj":
        return [[blk.attn.q_proj, blk.attn.k_proj] for blk in base.h]
    if family == "bloom":
        return [[blk.self_attention.query_key_value] for blk in base.h]
    return [[blk.attn.Wqkv] for blk in base.blocks]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("encoding,options", [("native", {}), ("trajectory", {"strength": 0.5}), ("none", {})])
def test_attention_equals_a_float64_reference_at_the_state_positions(models, family, encoding, options):
    """Every layer, a left-padded batch; trajectory positions are fractional (checked), and the reference
    at the integer ranks instead is far off, so the check sees the positions."""
    model = models[family]
    ids, mask, _ = left_padded(seed=7)
    layers = _layer_projections(family, model)
    with hf_trajpe.patch(model, encoding, **options) as handle:
        seen, hooks = _capture([m for layer in layers for m in layer])
        try:
            with torch.no_grad():
                out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        finally:
            for hk in hooks:
                hk.remove()
        positions = handle.state.step.positions.double()
    real = mask.bool()
    ranks = (mask.cumsum(-1) - 1).clamp(min=0).double()
    if encoding == "trajectory":
        assert (positions[real] != positions[real].round()).any()
    else:
        assert torch.equal(positions[real], ranks[real])
    per_layer = len(layers[0])
    for i, got in enumerate(out.attentions):
        proj = seen[i * per_layer:(i + 1) * per_layer]
        want = reference_probabilities(family, model, proj, None if encoding == "none" else positions, mask)
        rows = real[:, None, :, None].expand_as(want)  # real queries
        torch.testing.assert_close(got.double()[rows], want[rows], rtol=1e-4, atol=1e-5)
        if encoding == "trajectory":
            wrong = reference_probabilities(family, model, proj, ranks, mask)
            assert (got.double()[rows] - wrong[rows]).abs().max() > 1e-3


def test_gptj_rotation_reads_the_model_buffer_at_integers_and_the_formula_between():
    """The value at an integer position inside the table is the buffer's row bit for bit; at a fractional
    position, sin/cos of p * theta within float32 rounding; the gradient is the analytic one."""
    from hf_trajpe.patching.families.gptj import gptj_sincos_table, interleaved_sincos

    table = gptj_sincos_table(16, 8)
    p = torch.tensor([[0.0, 3.0, 3.25, 15.0, 17.5]], requires_grad=True)
    out = interleaved_sincos(p, table)
    assert torch.equal(out[0, [0, 1, 3]], table[[0, 3, 15]])
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angle = p.detach().double()[..., None] * theta
    torch.testing.assert_close(out.double(), torch.cat((angle.sin(), angle.cos()), -1), rtol=0, atol=1e-6)
    out[..., :4].sum().backward()  # d/dp sum_k sin(p theta_k) = sum_k theta_k cos(p theta_k)
    torch.testing.assert_close(p.grad.double(), (theta * angle.cos()).sum(-1), rtol=1e-5, atol=1e-6)
    # linear / cubic read the table's rows (grown with GPT-J's formula past the buffer): rows at integers
    whole = torch.tensor([[0.0, 3.0, 15.0, 600.0]])
    for mode in ("linear", "cubic"):
        got = interleaved_sincos(whole, table, mode)
        assert torch.equal(got[0, :3], table[[0, 3, 15]])
        assert torch.equal(got[0, 3], gptj_sincos_table(1024, 8)[600])


@pytest.mark.parametrize("family", FAMILIES)
def test_gradients_reach_a_learnable_strength_through_the_models_own_scheme(models, family):
    """Trajectory on the default base (GPT-J's rotation, BLOOM's and MPT's ALiBi): the loss reaches the
    strength through the positions."""
    model = models[family]
    ids = ids_of(8, seed=13)
    with hf_trajpe.patch(model, "trajectory", strength=0.3, learnable_strength=True) as handle:
        model(input_ids=ids, labels=ids).loss.backward()
        grad = handle.state.strength.raw.grad
    model.zero_grad(set_to_none=True)
    assert grad is not None and grad.abs().item() > 0


# -- KV cache and padding --------------------------------------------------------------------------------
CELLS = [(f, e, o) for f in FAMILIES for e, o in (("native", {}), ("trajectory", {"strength": 0.5}))]


@pytest.mark.parametrize("family,encoding,options", CELLS)
def test_cached_decoding_equals_recomputation(models, family, encoding, options):
    """Token by token with the cache (a left-padded batch) gives the logits of one forward; greedy
    generate() with the cache equals generate() without."""
    model = models[family]
    ids = ids_of(12, seed=5)
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = PAD, 0
    with hf_trajpe.patch(model, encoding, **options):
        full = logits(model, input_ids=ids, attention_mask=mask)
        inc = cached_logits(model, ids, mask)
        with torch.no_grad():
            kw = dict(attention_mask=mask[:, :8], max_new_tokens=4, do_sample=False, pad_token_id=PAD,
                      eos_token_id=None)
            cached = model.generate(ids[:, :8], use_cache=True, **kw)
            fresh = model.generate(ids[:, :8], use_cache=False, **kw)
    real = mask.bool()
    torch.testing.assert_close(inc[real], full[real], rtol=1e-4, atol=1e-5)
    assert torch.equal(cached, fresh)


@pytest.mark.parametrize("family,encoding,options", CELLS)
def test_a_left_padded_row_equals_the_sequence_alone(models, family, encoding, options):
    model = models[family]
    ids, mask, seqs = left_padded(seed=9)
    n = ids.shape[1]
    with hf_trajpe.patch(model, encoding, **options):
        batch = logits(model, input_ids=ids, attention_mask=mask)
        for i, s in enumerate(seqs):
            torch.testing.assert_close(batch[i, n - len(s):], logits(model, input_ids=s[None])[0],
                                       rtol=1e-4, atol=1e-5)


# -- unpatch ------------------------------------------------------------------------------------------
def _instance_state(model) -> tuple:
    """Attribute names of every module instance, hook counts, state-dict keys, attention implementation."""
    modules = list(model.modules())
    return (tuple(tuple(sorted(m.__dict__)) for m in modules),
            sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in modules),
            tuple(model.state_dict()), model.config._attn_implementation)


@pytest.mark.parametrize("family", FAMILIES)
def test_unpatch_leaves_nothing_behind(models, family):
    model = models[family]
    ids = ids_of(9, seed=11)
    before, stock = _instance_state(model), logits(model, input_ids=ids)
    base = model.base_model
    shadowed = {"gptj": "_get_embed_positions", "bloom": "build_alibi_tensor", "mpt": "build_mpt_alibi_tensor"}[family]
    owner = base
    if family == "gptj":  # transformers >= 5.24: one rotary module; before, a buffer in every attention layer
        rotary = getattr(base, "rotary_emb", None)
        owner, shadowed = (rotary, "forward") if rotary is not None else (base.h[0].attn, shadowed)
    for encoding, options in (("native", {}), ("trajectory", {"strength": 0.3}), ("none", {})):
        handle = hf_trajpe.patch(model, encoding, **options)
        assert shadowed in owner.__dict__
        handle.unpatch()
        assert shadowed not in owner.__dict__
        assert _instance_state(model) == before
        assert torch.equal(logits(model, input_ids=ids), stock)
