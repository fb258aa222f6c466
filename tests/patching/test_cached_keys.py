"""RoPE inside attention stores rotated keys in the KV cache (patching/cached_keys.py): a decoding step
rotates the new token's query and key only, and the logits are those of the old path (every cached key
rotated again at every step) bit for bit, and those of one forward over the whole sequence."""

from __future__ import annotations

import pytest
import torch
from patch_models import build, cached_logits, random_ids

import hf_trajpe
import hf_trajpe.patching.rotation as rotation
from hf_trajpe.compat import cache_kwarg
from hf_trajpe.patching.cached_keys import PREPARE_ATTR
from hf_trajpe.patching.state import MEMORY_ATTR


def _decode(model, ids: torch.Tensor, mask: torch.Tensor, prefix: int, cache) -> tuple[torch.Tensor, object]:
    """A prefill over ``ids[:, :prefix]`` into ``cache`` (an empty cache object, as ``generate()`` passes,
    or ``None``: the model makes its own), then one token at a time."""
    return cached_logits(model, ids, mask, prefix, cache=cache, return_cache=True)


@pytest.mark.parametrize("options", [{}, {"base": "rope", "strength": 0.5}])
def test_a_prepared_cache_gives_the_same_logits(options):
    from transformers import DynamicCache

    model = build("gpt2")
    ids = random_ids(12, b=2, seed=5)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with hf_trajpe.patch(model, "trajectory" if options else "rope", **options):
        full = model(input_ids=ids, attention_mask=mask).logits
        prepared, cache = _decode(model, ids, mask, 7, DynamicCache(config=model.config))
        assert cache.__dict__[MEMORY_ATTR].prepared
        plain, other = _decode(model, ids, mask, 7, None)  # the model's own cache: keys rotated at every step
        assert not other.__dict__[MEMORY_ATTR].prepared
    assert torch.equal(prepared, plain)
    real = mask.bool()
    torch.testing.assert_close(prepared[real], full[real], rtol=1e-4, atol=1e-5)


def test_a_decoding_step_rotates_only_the_new_token(monkeypatch):
    """Inside ``generate()``: after the prompt, every rotation covers one token (never the cache)."""
    model = build("gpt2")
    rows: list[int] = []
    real = rotation.rotate

    def spy(x, *tables):
        rows.append(x.shape[2])
        return real(x, *tables)

    monkeypatch.setattr(rotation, "rotate", spy)
    with hf_trajpe.patch(model, "trajectory", base="rope"):
        model.generate(random_ids(6), max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    layers = model.config.n_layer
    assert rows[: 2 * layers] == [6] * (2 * layers)  # the prompt: its queries and keys
    assert rows[2 * layers:] == [1] * (2 * layers * 3)  # three decoding steps: one query, one key per layer


def test_beam_search_reorders_prepared_keys():
    model = build("gpt2")
    ids = random_ids(6, b=2, seed=3)
    kw = dict(max_new_tokens=5, num_beams=3, do_sample=False, pad_token_id=0, eos_token_id=None)
    with hf_trajpe.patch(model, "trajectory", base="rope", strength=0.5):
        assert torch.equal(model.generate(ids, use_cache=True, **kw), model.generate(ids, use_cache=False, **kw))


@pytest.mark.parametrize("family,patches", [
    ("llama", [("rope", {"rotary_fraction": 0.5, "layers": [0]}),
               ("trajectory", {"base": "rope", "strength": 0.5, "rotary_fraction": 0.25, "layers": [1]})]),
    ("gpt2", [("rope", {"rotary_fraction": 0.5})]),
], ids=["llama-two-layer-selections", "gpt2-partial-rotary"])
def test_prepared_keys_with_layer_selections_and_partial_rotary(family, patches):
    """Each patch of a layer map registers its own layers with the cache, and a partial rotation stores keys
    rotated over their first dimensions only: cached decoding equals the old path and the whole forward."""
    from transformers import DynamicCache

    model = build(family)
    ids = random_ids(11, b=2, seed=9)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    handles = [hf_trajpe.patch(model, name, **options) for name, options in patches]
    try:
        full = model(input_ids=ids, attention_mask=mask).logits
        prepared, cache = _decode(model, ids, mask, 6, DynamicCache(config=model.config))
        memories = [v for k, v in cache.__dict__.items() if k.startswith(MEMORY_ATTR)]
        assert len(memories) == len(patches) and all(m.prepared for m in memories)
        registered = cache.__dict__[PREPARE_ATTR]  # every patch's layers, each with its own state
        owners = {i: h.state for h in handles for i in h.state.cache_layers}
        assert {i: ref() for i, ref in registered.items()} == owners
        assert len(registered) == model.config.num_hidden_layers  # (the two layers of the llama are both selected)
        plain, _ = _decode(model, ids, mask, 6, None)
    finally:
        for h in reversed(handles):
            h.unpatch()
    assert torch.equal(prepared, plain)
    real = mask.bool()
    torch.testing.assert_close(prepared[real], full[real], rtol=1e-4, atol=1e-5)


def test_a_prepared_cache_rotates_nothing_after_the_forward():
    """The cache's wrapper acts only during the patched forward that prepared it, and the state keeps no cache
    tensors alive; after ``unpatch`` the stock model adding to that cache (which holds the patch's rotated keys) is
    refused by name."""
    from transformers import DynamicCache

    model = build("gpt2")
    ids = random_ids(8, seed=4)
    cache = DynamicCache(config=model.config)
    handle = hf_trajpe.patch(model, "rope")
    with torch.no_grad():
        model(input_ids=ids[:, :5], use_cache=True, **{cache_kwarg(): cache})
    assert handle.state.step.cache is None and not handle.state.step.prepared_keys
    handle.unpatch()
    before = cache.layers[0].keys.clone()
    key = torch.randn(1, model.config.n_head, 1, model.config.n_embd // model.config.n_head)
    with pytest.raises(RuntimeError, match=r"filled by a model patched with rope.*after unpatch\(\)"):
        cache.update(key, torch.zeros_like(key), 0)
    assert torch.equal(cache.layers[0].keys, before)
