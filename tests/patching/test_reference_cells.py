"""Every (family, encoding) cell of the support table against a reference written from the formulas.

The other patching tests compare the patched model with itself (eager against sdpa, padded against
alone, cached against recomputed): they catch cache and padding bugs but not a wrong encoding applied
consistently. Here the expected logits come from the stock model with its positional machinery
replaced by the formulas of ``tests/reference.py`` (``reference_forward.py``; it imports nothing from
hf_trajpe), so a wrong slope, sign, frequency, layout, row offset, interpolation, position, limit or
mask shows up as a logit difference. The models are float32 and the references float64, so the
tolerance is a few float32 roundings, far below what any of those mistakes costs (checked per family by
``test_the_references_tell_the_cells_apart``).
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from patch_models import CAUSAL, FAMILIES, LEARNED, build, cell, cells_for, output, random_ids
from reference_forward import (
    STOCK,
    native_scheme,
    position_limit,
    rank_positions,
    reference_logits,
    trajectory_positions,
)

import hf_trajpe

ALL_CELLS = [(f, c) for f in FAMILIES for c in cells_for(f)]
ROTARY = tuple(f for f in FAMILIES if STOCK[f].rotary)
#: max |logit difference| allowed against the float64 reference. Logits are below 1.2; float32 rounding
#: alone puts the engine (and the stock model) up to 1.2e-6 away (Qwen3, whose q/k norms amplify it; most
#: cells 4e-7), while two cells that mean different things are at least 2.5e-4 apart (BERT, the weakest)
ATOL = 5e-6
#: attention scores times this (``sharpen``)
SHARPEN = 16.0


# -- inputs and models ----------------------------------------------------------------------------
def padded_batch(pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row 0: a hole at 5 and right padding; row 1: left padding. Pad ids where the mask is 0."""
    ids = random_ids(11, b=2, seed=3)
    mask = torch.ones_like(ids)
    mask[0, 5] = mask[0, 9:] = 0
    mask[1, :4] = 0
    return ids.masked_fill(mask == 0, pad), mask


def batches(model) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    return {"padded": padded_batch(int(model.config.pad_token_id)), "plain": (random_ids(9, b=2, seed=7), None)}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models run several times faster on one thread when the cores are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def sharpen(model, factor: float = SHARPEN):
    """Multiply every attention module's score scaling: random init leaves scores near 0 and attention
    nearly uniform, which hides position; sharper attention makes a positional error cost more."""
    found = 0
    for m in model.modules():
        if isinstance(getattr(m, "scaling", None), float) and hasattr(m, "is_causal"):
            m.scaling *= factor
            found += 1
    assert found == model.config.num_hidden_layers, type(model).__name__
    return model


@pytest.fixture(scope="module")
def models():
    """Tiny sharpened models built once per module; every test leaves them unpatched and stock."""
    cache: dict[tuple[str, str], torch.nn.Module] = {}

    def get(family: str, attn: str = "sdpa"):
        if (family, attn) not in cache:
            cache[family, attn] = sharpen(build(family, attn))
        model = cache[family, attn]
        assert "hf_trajpe" not in model._modules, "a previous test left the model patched"
        return model

    return get


def semantics(family: str, name: str) -> tuple[str, float | None]:
    """What a cell means, from its options alone: (scheme, trajectory strength or None)."""
    enc, opts = cell(name)
    if enc == "trajectory":
        return opts.get("base") or native_scheme(family), opts["strength"]
    return (native_scheme(family) if enc == "native" else enc), None


def expected(model, family: str, name: str, ids, mask, **options) -> torch.Tensor:
    scheme, strength = semantics(family, name)
    if strength is None:
        positions = rank_positions(ids, mask)
    else:
        positions = trajectory_positions(model, family, ids, mask, strength=strength, scheme=scheme,
                                         beta=options.get("beta", 2.0), max_positions=options.get("max_positions"))
    return reference_logits(model, family, scheme, ids, mask, positions,
                            rope_theta=options.get("rope_theta", 10000.0),
                            sinusoid_scale=options.get("sinusoid_scale", 1.0))


@pytest.fixture(scope="module")
def references(models):
    """Reference logits per (family, cell, batch), computed once and shared by eager and sdpa."""
    cache: dict[tuple[str, str, str], torch.Tensor] = {}

    def get(family: str, name: str, batch: str) -> torch.Tensor:
        if (family, name, batch) not in cache:
            model = models(family)
            ids, mask = batches(model)[batch]
            cache[family, name, batch] = expected(model, family, name, ids, mask)
        return cache[family, name, batch]

    return get


def patched(model, name: str, ids, mask, **extra) -> torch.Tensor:
    enc, opts = cell(name)
    with hf_trajpe.patch(model, enc, **opts, **extra):
        return output(model, input_ids=ids, attention_mask=mask)


def assert_real_tokens_match(got, want, mask, what: str = "") -> None:
    real = torch.ones(got.shape[:2], dtype=torch.bool) if mask is None else mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=ATOL, msg=lambda m: f"{what}: {m}")


# -- every cell -----------------------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family,name", ALL_CELLS)
def test_cell_matches_the_reference(family, name, attn, models, references):
    """The patched model's logits at real tokens equal the reference's, for a batch with left padding,
    right padding and a hole, and for an unpadded batch passed without a mask (a separate code path)."""
    model = models(family, attn)
    for batch, (ids, mask) in batches(model).items():
        got = patched(model, name, ids, mask)
        assert_real_tokens_match(got, references(family, name, batch), mask, f"{family} {name} {attn} {batch}")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_references_tell_the_cells_apart(family, references):
    """Each cell's test can fail: cells that mean different things have references far apart (so an
    engine that applied a neighbouring encoding, or integer positions instead of trajectory ones,
    would miss by much more than the tolerance)."""
    by_meaning: dict[tuple, str] = {}
    for name in cells_for(family):
        by_meaning.setdefault(semantics(family, name), name)
    for a, b in itertools.combinations(by_meaning.values(), 2):
        for batch in ("padded", "plain"):
            gap = (references(family, a, batch) - references(family, b, batch)).abs().max().item()
            assert gap > 20 * ATOL, f"{family}: {a} and {b} differ by only {gap:.1e} ({batch})"


# -- options --------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,base", [(f, native_scheme(f)) for f in FAMILIES]
                         + [("gpt2", "sinusoidal"), ("gpt2", "rope"), ("gpt2", "alibi"), ("bert", "alibi")])
def test_trajectory_positions_clamp_at_max_positions(family, base, models):
    """An explicit max_positions that the displacement reaches past: positions stop at max_positions - 1
    (a sequence may not be longer than the limit, so only the displacement can get there)."""
    model = models(family)
    limit = 8
    name = "trajectory/learned" if base == "learned" else f"trajectory/{base}"
    padded_ids, padded_mask = padded_batch(int(model.config.pad_token_id))
    for ids, mask in ((padded_ids[:, :limit], padded_mask[:, :limit]), (random_ids(limit, b=2, seed=7), None)):
        positions = trajectory_positions(model, family, ids, mask, strength=0.5, max_positions=limit)
        assert positions.max() == limit - 1  # the clamp is exercised
        want = expected(model, family, name, ids, mask, max_positions=limit)
        with pytest.warns(RuntimeWarning, match=f"clamped to {limit - 1}"):
            got = patched(model, name, ids, mask, max_positions=limit)
        assert_real_tokens_match(got, want, mask)


@pytest.mark.parametrize("family,name,n", [
    ("gpt2", "trajectory", 60), ("roberta", "trajectory", 60), ("gpt2", "trajectory/sinusoidal", 60),
    ("roberta", "trajectory/sinusoidal", 60), ("bert", "trajectory/alibi", 60), ("llama", "trajectory", 120),
    ("gpt_neox", "trajectory/sinusoidal", 120),
])
def test_without_max_positions_only_a_learned_table_clamps(family, name, n, models):
    """Without max_positions, trajectory positions clamp only where a learned table ends (its last row;
    RoBERTa's counted from its pad_token_id + 1 offset), with a warning and a count; on RoPE, ALiBi and
    the sinusoid they run past the model's max_position_embeddings, as integer positions would."""
    model = models(family)
    ids = random_ids(n, b=1, seed=11)
    scheme, _ = semantics(family, name)
    unclamped = trajectory_positions(model, family, ids, strength=0.5, max_positions=10**6)
    table_end = position_limit(model, family, "learned") if family in LEARNED else model.config.max_position_embeddings
    assert unclamped.max() > table_end - 1 + 0.5, "the sequence must reach past the table's end"
    want = expected(model, family, name, ids, None)
    enc, opts = cell(name)
    with hf_trajpe.patch(model, enc, **opts) as handle:
        if scheme == "learned":
            with pytest.warns(RuntimeWarning, match="clamped"):
                got = output(model, input_ids=ids)
            assert handle.clamped_tokens > 0
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = output(model, input_ids=ids)
            assert handle.clamped_tokens == 0
    assert_real_tokens_match(got, want, None)


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_rope_theta_sets_rope_on_a_model_without_rotary(family, models):
    model = models(family)
    ids, mask = padded_batch(int(model.config.pad_token_id))
    for name in ("rope", "trajectory/rope"):
        want = expected(model, family, name, ids, mask, rope_theta=50.0)
        assert_real_tokens_match(patched(model, name, ids, mask, rope_theta=50.0), want, mask, name)


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_a_rotary_model_keeps_its_own_frequencies_and_rotary_width(family):
    """A model with its own rotary module (here theta 500, GPT-NeoX rotating half of each head) keeps
    its frequencies and width whatever rope_theta says."""
    params = {"rope_type": "default", "rope_theta": 500.0}
    if family == "gpt_neox":
        params["partial_rotary_factor"] = 0.5
    model = sharpen(build(family, rope_parameters=params))
    ids, mask = padded_batch(int(model.config.pad_token_id))
    for name in ("rope", "trajectory"):
        want = expected(model, family, name, ids, mask)
        assert_real_tokens_match(patched(model, name, ids, mask, rope_theta=20000.0), want, mask, name)


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_sinusoid_scale_scales_the_added_sinusoid(family, models):
    model = models(family)
    ids, mask = padded_batch(int(model.config.pad_token_id))
    for name in ("sinusoidal", "trajectory/sinusoidal"):
        want = expected(model, family, name, ids, mask, sinusoid_scale=0.05)
        assert_real_tokens_match(patched(model, name, ids, mask, sinusoid_scale=0.05), want, mask, name)


@pytest.mark.parametrize("family", ["gpt2", "qwen3", "roberta"])
def test_beta_reaches_the_trajectory(family, models):
    model = models(family)
    ids, mask = padded_batch(int(model.config.pad_token_id))
    want = expected(model, family, "trajectory", ids, mask, beta=0.7)
    assert_real_tokens_match(patched(model, "trajectory", ids, mask, beta=0.7), want, mask)


# -- bit-exact stock equivalence ------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_native_and_own_rope_equal_stock_given_rank_position_ids_bit_for_bit(family, attn, models):
    """The stock model, told the rank of each real token as position_ids (RoBERTa: offset by
    pad_token_id + 1, pads at pad_token_id), is the reference for native (and for rope on a rotary
    model) under left/right padding and holes: equal to the last bit."""
    model = models(family, attn)
    pad = int(model.config.pad_token_id)
    ids, mask = padded_batch(pad)
    rank = torch.from_numpy(rank_positions(ids, mask)).long()
    position_ids = torch.where(mask.bool(), rank + pad + 1, pad) if family == "roberta" else rank
    stock = output(model, input_ids=ids, attention_mask=mask, position_ids=position_ids)
    plain, _ = batches(model)["plain"]
    stock_plain = output(model, input_ids=plain)
    for enc in ("native",) + (("rope",) if family in ROTARY else ()):
        got = patched(model, enc, ids, mask)
        real = mask.bool()
        torch.testing.assert_close(got[real], stock[real], rtol=0, atol=0)
        torch.testing.assert_close(patched(model, enc, plain, None), stock_plain, rtol=0, atol=0)


def test_cells_cover_the_support_table():
    """Every family here has a stock layout in the reference, and the causal ones are causal."""
    assert set(STOCK) == set(FAMILIES)
    for f in FAMILIES:
        assert STOCK[f].causal == (f in CAUSAL)
        assert (STOCK[f].table is not None) == (f in LEARNED)
        assert ("trajectory/learned" in cells_for(f)) == (f in LEARNED)
    assert len(ALL_CELLS) == len(LEARNED) * 10 + (len(FAMILIES) - len(LEARNED)) * 9
