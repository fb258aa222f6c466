"""Room to grow in a prepared KV cache (patching/cache_room.py): a decoding step writes its rows in place instead
of copying the whole cache; the layer holds exactly what ``torch.cat`` gives, and the logits do not change."""

from __future__ import annotations

import pytest
import torch
from patch_models import build, cached_logits, random_ids
from test_remap import METHODS, encoding, left_padded

import hf_trajpe
import hf_trajpe.patching.cache_room as cache_room
import hf_trajpe.patching.cached_keys as cached_keys
from hf_trajpe.patching.cache_room import ROOM_ATTR, append_in_place


def _cache(t: int, width: int = 6, seed: int = 0):
    from transformers import DynamicCache

    g = torch.Generator().manual_seed(seed)
    cache = DynamicCache()
    cache.update(torch.randn(2, 3, t, width, generator=g), torch.randn(2, 3, t, 4, generator=g), 0)
    return cache, g


def _rows(g: torch.Generator, n: int, width: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3, n, width, generator=g), torch.randn(2, 3, n, 4, generator=g)


def test_appending_in_place_holds_what_concatenation_gives(monkeypatch):
    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    monkeypatch.setattr(cache_room, "MIN_ROOM", 3)
    cache, g = _cache(10)
    layer = cache.layers[0]
    expect_k, expect_v = layer.keys.clone(), layer.values.clone()
    buffers = []
    with torch.no_grad():
        for n in (1, 1, 2, 1, 1, 1):
            k, v = _rows(g, n)
            expect_k, expect_v = torch.cat((expect_k, k), dim=-2), torch.cat((expect_v, v), dim=-2)
            got_k, got_v = append_in_place(cache, 0, k, v)
            assert got_k is layer.keys and got_v is layer.values
            assert torch.equal(got_k, expect_k) and torch.equal(got_v, expect_v)
            assert cache.get_seq_length() == expect_k.shape[-2]
            buffers.append(layer.__dict__[ROOM_ATTR][0].data_ptr())
    # 10 + 1 = 11 rows get a buffer of 11 + 3: the next three rows go in place, then a new buffer
    assert buffers[0] == buffers[1] == buffers[2] and buffers[3] != buffers[2]


@pytest.mark.parametrize("change", ["crop", "select", "repeat"])
def test_a_layer_changed_elsewhere_gets_a_new_buffer(monkeypatch, change):
    """Cropped (assisted decoding), rows selected (beam search) or repeated: the layer's tensors are no longer the
    buffer's first rows, so the next step copies them into a new buffer instead of writing after stale rows."""
    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    cache, g = _cache(12)
    layer = cache.layers[0]
    with torch.no_grad():
        append_in_place(cache, 0, *_rows(g, 1))
        before = layer.__dict__[ROOM_ATTR][0]
        {"crop": lambda: cache.crop(-3), "select": lambda: cache.batch_select_indices(torch.tensor([1, 0])),
         "repeat": lambda: cache.batch_repeat_interleave(1)}[change]()
        expect_k, expect_v = layer.keys.clone(), layer.values.clone()
        k, v = _rows(g, 1)
        got_k, got_v = append_in_place(cache, 0, k, v)
    assert torch.equal(got_k, torch.cat((expect_k, k), dim=-2)) and torch.equal(got_v, torch.cat((expect_v, v), -2))
    if change != "repeat":  # (repeating once returns the same tensors: still the buffer's)
        assert layer.__dict__[ROOM_ATTR][0].data_ptr() != before.data_ptr()


def test_what_keeps_the_stock_update(monkeypatch):
    """Short caches, autograd, another dtype and layers other than the plain dynamic one: ``None`` (stock)."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    cache, g = _cache(12)
    assert append_in_place(cache, 0, *_rows(g, 1)) is None  # 13 < GROW_FROM under autograd and by length
    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    assert append_in_place(cache, 0, *_rows(g, 1)) is None  # grad enabled
    with torch.no_grad():
        k, v = _rows(g, 1)
        assert append_in_place(cache, 0, k.double(), v.double()) is None
        assert append_in_place(cache, 1, k, v) is None  # no such layer
        sliding, _ = _cache(12)
        sliding.layers[0] = DynamicSlidingWindowLayer(sliding_window=64)
        sliding.update(torch.zeros(2, 3, 12, 6), torch.zeros(2, 3, 12, 4), 0)
        assert append_in_place(sliding, 0, k, v) is None


@pytest.mark.parametrize("method", ["self_extend", "dca"])
def test_generation_with_room_gives_the_same_logits(monkeypatch, method):
    """A left-padded batch decoded past the window with room in every layer (from 8 cached tokens here): the
    logits equal, bit for bit, those of the stock concatenation, and the layers hold views of their buffers."""
    from transformers import DynamicCache

    model = build("llama")
    ids, mask = left_padded((30, 21))
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]):
        stock, _ = cached_logits(model, ids, mask, 20, cache=DynamicCache(config=model.config), return_cache=True)
        monkeypatch.setattr(cache_room, "GROW_FROM", 8)
        roomy, cache = cached_logits(model, ids, mask, 20, cache=DynamicCache(config=model.config), return_cache=True)
    assert torch.equal(roomy, stock)
    for layer in cache.layers:
        buffer = layer.__dict__[ROOM_ATTR][0]
        assert layer.keys.data_ptr() == buffer.data_ptr() and buffer.shape[-2] > layer.keys.shape[-2]


def test_beam_search_with_room_matches_recomputation(monkeypatch):
    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    calls = []
    real = cached_keys.append_in_place

    def spy(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(cached_keys, "append_in_place", spy)
    model = build("llama")
    ids = random_ids(24, b=2, seed=3)
    kw = dict(max_new_tokens=6, num_beams=3, do_sample=False, pad_token_id=0, eos_token_id=None)
    with hf_trajpe.patch(model, "self_extend", **METHODS["self_extend"]):
        assert torch.equal(model.generate(ids, use_cache=True, **kw), model.generate(ids, use_cache=False, **kw))
    assert any(calls)


def test_a_layer_that_falls_back_lets_go_of_its_buffer(monkeypatch):
    """Autograd on, or a crop below the threshold: the stock update runs and the layer holds no buffer."""
    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    cache, g = _cache(12)
    layer = cache.layers[0]
    with torch.no_grad():
        append_in_place(cache, 0, *_rows(g, 1))
    assert ROOM_ATTR in layer.__dict__
    assert append_in_place(cache, 0, *_rows(g, 1)) is None  # autograd
    assert ROOM_ATTR not in layer.__dict__


def test_a_buffer_made_in_inference_mode_is_not_written_outside_it(monkeypatch):
    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    cache, g = _cache(12)
    with torch.inference_mode():
        append_in_place(cache, 0, *_rows(g, 1))
    expect_k = cache.layers[0].keys.clone()
    with torch.no_grad():
        k, v = _rows(g, 1)
        got_k, _ = append_in_place(cache, 0, k, v)  # a new buffer, not a refused write into the inference one
    assert torch.equal(got_k, torch.cat((expect_k, k), dim=-2))


def test_a_shallow_copy_of_a_layer_does_not_write_into_the_originals_room(monkeypatch):
    import copy

    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    cache, g = _cache(12)
    with torch.no_grad():
        append_in_place(cache, 0, *_rows(g, 1))
        original = cache.layers[0]
        keys_before = original.keys.clone()
        twin, _ = _cache(1)
        twin.layers[0] = copy.copy(original)
        append_in_place(twin, 0, *_rows(g, 1))
        append_in_place(cache, 0, *_rows(g, 1))
    assert twin.layers[0].__dict__[ROOM_ATTR][0].data_ptr() != original.__dict__[ROOM_ATTR][0].data_ptr()
    assert torch.equal(original.keys[..., :13, :], keys_before)


def test_a_cache_with_its_own_update_keeps_it(monkeypatch):
    from transformers import DynamicCache

    class Counting(DynamicCache):
        def update(self, *args, **kwargs):
            return super().update(*args, **kwargs)

    monkeypatch.setattr(cache_room, "GROW_FROM", 8)
    cache = Counting()
    cache.update(torch.zeros(2, 3, 12, 6), torch.zeros(2, 3, 12, 4), 0)
    with torch.no_grad():
        assert append_in_place(cache, 0, torch.zeros(2, 3, 1, 6), torch.zeros(2, 3, 1, 4)) is None
