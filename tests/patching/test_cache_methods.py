"""The KV cache's own methods, as transformers and users call them on a patched model's cache: ``crop`` (assisted
generation and prompt lookup after rejected draft tokens, regenerating an answer), ``batch_select_indices`` and
``batch_repeat_interleave`` (a served batch, several return sequences), and a cache filled under one patch read
by any other reader (refused by name)."""

from __future__ import annotations

import pytest
import torch
from patch_models import build, output, random_ids
from test_remap import METHODS, encoding, left_padded

import hf_trajpe
from hf_trajpe.compat import cache_kwarg, output_cache

#: patches whose positions a crop can follow exactly
CROPPABLE = {
    **{m: (encoding(m), METHODS[m]) for m in ("self_extend", "rerope", "dca", "string")},
    "native": ("native", {}),
    "rope/yarn": ("rope", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}),
    "alibi": ("alibi", {}),
}
#: patches whose positions depend on every earlier token: a forward after a crop is refused
UNCROPPABLE = {
    "trajectory": ("trajectory", {"strength": 0.5}),
    "self_extend_units": ("self_extend_units", {"group_size": 3, "window": 8, "boundary_ids": [5, 17, 40]}),
}
TOL = dict(rtol=1e-5, atol=1e-5)


def prefill(model, ids, mask=None):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
    return output_cache(out)


def step(model, ids, cache, mask=None):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, use_cache=True, **{cache_kwarg(): cache}).logits


@pytest.mark.parametrize("name", list(CROPPABLE))
def test_a_cropped_cache_continues_at_the_right_positions(name):
    """After ``crop(-7)`` at 60 tokens the next tokens are the 54th on: the logits of one forward."""
    model = build("llama")
    ids = random_ids(61, seed=5)
    enc, opts = CROPPABLE[name]
    with hf_trajpe.patch(model, enc, **opts):
        want = output(model, input_ids=ids)[:, 53:]
        cache = prefill(model, ids[:, :60])
        cache.crop(-7)
        assert cache.get_seq_length() == 53
        got = step(model, ids[:, 53:], cache)
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("name", list(UNCROPPABLE))
def test_a_crop_the_positions_cannot_follow_is_refused_at_the_next_forward(name):
    model = build("llama")
    ids = random_ids(61, seed=5)
    enc, opts = UNCROPPABLE[name]
    with hf_trajpe.patch(model, enc, **opts):
        cache = prefill(model, ids[:, :60])
        cache.crop(-7)
        with pytest.raises(RuntimeError, match=r"cropped .* cannot be taken back; generate again from the prompt"):
            step(model, ids[:, 53:], cache)


@pytest.mark.parametrize("name", ["dca", "native"])
def test_prompt_lookup_decoding_equals_plain_greedy(name):
    """Prompt lookup drafts tokens from the prompt and crops the cache where the model rejects them."""
    model = build("llama")
    ids = random_ids(12, seed=6).repeat(1, 4)  # repeated n-grams: drafts to try
    enc, opts = CROPPABLE[name]
    kwargs = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
    with hf_trajpe.patch(model, enc, **opts):
        plain = model.generate(ids, **kwargs)
        looked = model.generate(ids, prompt_lookup_num_tokens=4, **kwargs)
    assert torch.equal(looked, plain)


@pytest.mark.parametrize("name", ["self_extend", "native", "trajectory"])
def test_rows_selected_or_repeated_through_the_cache_keep_their_positions(name):
    """A left-padded batch of two lengths, its cache's rows swapped, one dropped, or repeated: each row continues
    at its own positions, as the same rows read in one forward."""
    model = build("llama")
    ids, mask = left_padded((40, 27))
    enc, opts = {**CROPPABLE, **UNCROPPABLE}[name]
    with hf_trajpe.patch(model, enc, **opts):
        full = output(model, input_ids=ids, attention_mask=mask)
        for index in (torch.tensor([1, 0]), torch.tensor([1])):
            cache = prefill(model, ids[:, :-3], mask[:, :-3])
            cache.batch_select_indices(index)
            got = step(model, ids[index, -3:], cache, mask[index])
            torch.testing.assert_close(got, full[index, -3:], **TOL)
        cache = prefill(model, ids[:, :-3], mask[:, :-3])
        cache.batch_repeat_interleave(2)
        got = step(model, ids.repeat_interleave(2, 0)[:, -3:], cache, mask.repeat_interleave(2, 0))
        torch.testing.assert_close(got, full.repeat_interleave(2, 0)[:, -3:], **TOL)


def test_generate_from_a_prefilled_cache_with_beams_and_several_sequences():
    """generate() does not repeat a prefilled cache's rows for its beams (transformers' own models fail there with
    a size mismatch): refused saying how, and once repeated with the cache's own method, the same as generating
    from the prompt."""
    model = build("llama")
    ids = random_ids(20, seed=7)
    kwargs = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0, num_beams=2,
                  num_return_sequences=2)
    with hf_trajpe.patch(model, "self_extend", **METHODS["self_extend"]):
        want = model.generate(ids, **kwargs)
        cache = prefill(model, ids[:, :-1])
        with pytest.raises(RuntimeError, match=r"batch 1, the input has batch 2.*cache.batch_repeat_interleave\(k\)"):
            model.generate(ids, **{cache_kwarg(): cache}, **kwargs)
        cache = prefill(model, ids[:, :-1])
        cache.batch_repeat_interleave(2)
        got = model.generate(ids, **{cache_kwarg(): cache}, **kwargs)
    assert torch.equal(got, want)


@pytest.mark.parametrize("first,second", [
    (("dca", METHODS["dca"]), None),  # the unpatched model
    (("dca", METHODS["dca"]), ("native", {})),
    (("trajectory", {"strength": 0.5}), ("alibi", {})),
    (("self_extend", METHODS["self_extend"]), ("rope", {})),
])
def test_a_cache_filled_under_one_patch_is_refused_by_any_other_reader(first, second):
    model = build("llama")
    ids = random_ids(30)
    with hf_trajpe.patch(model, first[0], **first[1]):
        cache = prefill(model, ids[:, :20])
    refused = pytest.raises(RuntimeError, match=rf"filled by a model patched with {first[0]}\b.*start generation "
                                                "again")
    if second is None:
        with refused:
            step(model, ids[:, 20:21], cache)
    else:
        with hf_trajpe.patch(model, second[0], **second[1]), refused:
            step(model, ids[:, 20:21], cache)
    with hf_trajpe.patch(model, first[0], **first[1]):  # the same patch again continues it
        step(model, ids[:, 20:21], cache)


def test_an_emptied_cache_is_free_for_any_reader():
    """After ``reset()`` a cache holds no positions: the stock model (or another patch) may fill it again."""
    model = build("llama")
    ids = random_ids(30)
    with hf_trajpe.patch(model, "dca", **METHODS["dca"]):
        cache = prefill(model, ids[:, :20])
    cache.reset()
    assert cache.get_seq_length() == 0
    want = output(model, input_ids=ids[:, :5])
    with torch.no_grad():
        got = model(input_ids=ids[:, :5], use_cache=True, **{cache_kwarg(): cache}).logits
    torch.testing.assert_close(got, want, **TOL)
