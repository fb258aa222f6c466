"""A deep copy of a patched model's KV cache is a cache of its own: its row methods (``batch_repeat_interleave``,
``batch_select_indices``, ``crop``) move its own positions, not those of the cache it was copied from."""

from __future__ import annotations

import copy

import pytest
import torch
from patch_models import build, output, random_ids

import hf_trajpe
from hf_trajpe.compat import cache_kwarg, output_cache


@pytest.mark.parametrize("encoding,options", [("self_extend", {"group_size": 2, "window": 4}), ("rope", {})])
def test_a_deep_copy_of_a_cache_repeats_its_own_rows(encoding, options):
    model = build("llama")
    ids = random_ids(9)
    with hf_trajpe.patch(model, encoding, **options), torch.no_grad():
        want = output(model, input_ids=ids)[:, -1:]
        cache = output_cache(model(input_ids=ids[:, :8], use_cache=True))
        copied = copy.deepcopy(cache)
        copied.batch_repeat_interleave(2)
        got = model(input_ids=ids[:, 8:].repeat(2, 1), use_cache=True, **{cache_kwarg(): copied}).logits
        torch.testing.assert_close(got, want.repeat(2, 1, 1), rtol=1e-5, atol=1e-5)
        got = model(input_ids=ids[:, 8:], use_cache=True, **{cache_kwarg(): cache}).logits  # the original: batch 1
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
