"""The KV cache of the remaps (schemes/remap/keys.py): a key's rotation depends on its own position only, so the
cache keeps each key rotated once per key rotation of the scheme (two for Self-Extend and ReRoPE, one for DCA and
STRING) and a decoding step rotates its new query and key only; the logits are those of the old path (unrotated
keys rotated again at every step) and of one forward over the whole sequence."""

from __future__ import annotations

import pytest
import torch
from patch_models import build, cached_logits, random_ids
from test_remap import METHODS, encoding, left_padded

import hf_trajpe
import hf_trajpe.patching.schemes.remap.kernels.blocks as blocks
import hf_trajpe.patching.schemes.remap.keys as remap_keys
from hf_trajpe.compat import cache_kwarg, output_cache
from hf_trajpe.patching.state import MEMORY_ATTR

#: method -> how many copies of each key the cache holds (the scheme's distinct key rotations)
COPIES = {"self_extend": 2, "rerope": 2, "rerope/leak": 2, "dca": 1, "string": 1}


def _scheme(method: str):
    with hf_trajpe.patch(build("llama"), encoding(method), **METHODS[method]) as handle:
        return handle.state.scheme


@pytest.mark.parametrize("method", list(METHODS))
def test_a_keys_rotation_follows_from_its_own_position(method):
    """What the cache relies on: the key positions of every region, read with any queries, are those of
    ``key_rotations`` (read without queries), and those of a prefix of the keys are the prefix of those."""
    scheme = _scheme(method)
    keys = torch.arange(90, dtype=torch.float32)[None].expand(2, 90)
    alone = scheme.key_rotations(keys)
    assert len(alone) == COPIES[method]
    for queries in (torch.arange(60, 90, dtype=torch.float32)[None].expand(2, 30), keys[:, -1:]):
        regions = scheme.regions(queries, keys)
        positions, which = scheme.query_rotations(queries)
        assert len(positions) == len(regions) == len(which)
        for (q, k), p, index in zip(regions, positions, which, strict=True):
            assert torch.equal(k, alone[index]) and torch.equal(q, p)
    for got, whole in zip(scheme.key_rotations(keys[:, :37]), alone, strict=True):
        assert torch.equal(got, whole[:, :37])


@pytest.mark.parametrize("method", list(METHODS))
def test_the_cache_holds_rotated_keys_with_the_same_logits(method):
    """A prepared cache (the empty cache object ``generate()`` passes) holds each key once per key rotation, side
    by side in the last axis; its logits equal, bit for bit, those of a cache the model made itself (unrotated
    keys, rotated again at every step), and those of one forward, on a left-padded batch past the window."""
    from transformers import DynamicCache

    model = build("llama")
    ids, mask = left_padded((30, 21))
    d = model.config.head_dim
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]):
        full = model(input_ids=ids, attention_mask=mask).logits
        prepared, cache = cached_logits(model, ids, mask, 20, cache=DynamicCache(config=model.config),
                                        return_cache=True)
        plain, other = cached_logits(model, ids, mask, 20, return_cache=True)
    assert cache.__dict__[MEMORY_ATTR].prepared and not other.__dict__[MEMORY_ATTR].prepared
    assert all(layer.keys.shape[-1] == COPIES[method] * d and layer.values.shape[-1] == d for layer in cache.layers)
    assert all(layer.keys.shape[-1] == d for layer in other.layers)
    assert torch.equal(prepared, plain)
    real = mask.bool()
    torch.testing.assert_close(prepared[real], full[real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["self_extend", "dca"])
def test_a_decoding_step_rotates_no_cached_key(monkeypatch, method):
    """Inside ``generate()``: after the prompt, every rotation covers one token, the new query (once per region)
    and the new key (once per key rotation) of each layer, never the cache."""
    model = build("llama")
    rows: list[int] = []
    real = remap_keys.rotate

    def spy(x, *args, **kwargs):
        rows.append(x.shape[2])
        return real(x, *args, **kwargs)

    monkeypatch.setattr(remap_keys, "rotate", spy)
    monkeypatch.setattr(blocks, "rotate", spy)
    prompt, new = 30, 4
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]) as handle:
        regions = len(handle.state.scheme.regions(torch.zeros(1, 1), torch.zeros(1, 1)))
        model.generate(random_ids(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                       pad_token_id=0)
    per_step = model.config.num_hidden_layers * (regions + COPIES[method])
    assert rows[:per_step] == [prompt] * per_step  # the prompt: its queries and keys, each rotated once per table
    assert rows[per_step:] == [1] * (per_step * (new - 1))


def test_beam_search_reorders_the_rotated_copies():
    model = build("llama")
    ids = random_ids(24, b=2, seed=3)
    kw = dict(max_new_tokens=6, num_beams=3, do_sample=False, pad_token_id=0, eos_token_id=None)
    with hf_trajpe.patch(model, "self_extend", **METHODS["self_extend"]):
        assert torch.equal(model.generate(ids, use_cache=True, **kw), model.generate(ids, use_cache=False, **kw))


def test_a_layer_selection_keeps_its_own_layers_copies():
    """``layers=``: the selected layers' keys are stored once per key rotation, the others as the model rotates
    them; cached generation still equals recomputation."""
    model = build("llama")
    ids, mask = left_padded((30, 21))
    kw = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None,
              return_dict_in_generate=True)
    with hf_trajpe.patch(model, "rerope", **METHODS["rerope"], layers=[1]) as handle:
        assert set(handle.state.cache_layers) == {1}
        cached = model.generate(ids, use_cache=True, **kw)
        recomputed = model.generate(ids, use_cache=False, **kw)
    d = model.config.head_dim
    keys = [layer.keys.shape[-1] for layer in output_cache(cached).layers]
    assert keys == [d, 2 * d]
    assert torch.equal(cached.sequences, recomputed.sequences)


def test_a_cache_filled_by_another_remap_is_refused():
    from transformers import DynamicCache

    model = build("llama")
    ids = random_ids(30)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        with hf_trajpe.patch(model, "self_extend", **METHODS["self_extend"]):
            model(input_ids=ids[:, :20], use_cache=True, **{cache_kwarg(): cache})
        refused = pytest.raises(RuntimeError, match=r"filled by a model patched with self_extend .*keys rotated "
                                                  r"for it\), not with dca.*start generation again")
        with hf_trajpe.patch(model, "dca", **METHODS["dca"]), refused:
            model(input_ids=ids[:, 20:21], use_cache=True, **{cache_kwarg(): cache})


@pytest.mark.parametrize("method", ["self_extend", "string"])
def test_a_model_that_repeats_the_cached_keys_heads(method):
    """JetMoE repeats the heads of the keys its cache returns before attention (a new tensor): the copies of a key
    stay together in the last axis, and the layer knows its keys are rotated without recognising the tensor."""
    from hf_trajpe.coverage.tiny import tiny_model

    model = tiny_model("jetmoe")
    ids = random_ids(30, seed=6)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None, output_scores=True,
              return_dict_in_generate=True)
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]):
        cached = model.generate(ids, use_cache=True, **kw)
        recomputed = model.generate(ids, use_cache=False, **kw)
    assert output_cache(cached).layers[0].keys.shape[-1] == COPIES[method] * model.config.kv_channels
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(recomputed.scores), rtol=1e-4, atol=1e-4)


def test_a_model_with_a_mask_per_head_is_refused_with_the_reason():
    """Doge computes a float mask per head (its dynamic mask attention); the remap reads masks as allowed pairs
    shared by all heads, so it refuses rather than drop the model's values."""
    from hf_trajpe.coverage.tiny import tiny_model

    model = tiny_model("doge").eval()
    ids = torch.arange(2, 14).reshape(2, 6)
    with hf_trajpe.patch(model, "self_extend", group_size=2, window=2):
        with pytest.raises(NotImplementedError, match="mask per head"):
            model(ids, attention_mask=torch.ones_like(ids))
