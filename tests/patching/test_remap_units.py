"""Self-Extend over units of meaning (``self_extend_units``): against a float64 reference whose unit starts are
computed here token by token from the definition; Self-Extend itself when every token ends a unit; the KV
cache, beam search, padding, save and reload; its options and the boundary ids read from a tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from patch_models import build, output, random_ids
from remap_reference import DISTANCES, remap_reference_logits
from test_remap import FAMILIES, TOL, left_padded

import hf_trajpe
from hf_trajpe.patching.schemes.remap.units import advance, boundary_ids

G, W = 3, 8
#: frequent among the test ids (random_ids draws from 3..127): about one token in six ends a unit
BOUNDARIES = list(range(3, 128, 6))
OPTIONS = {"group_size": G, "window": W, "boundary_ids": BOUNDARIES}


def unit_starts(ids: torch.Tensor, mask: torch.Tensor, boundaries, group: int) -> np.ndarray:
    """Per row and rank, the snapped start of the token's unit, token by token from the definition."""
    out = np.zeros(ids.shape, dtype=np.float64)
    for r in range(ids.shape[0]):
        start, rank = 0, 0
        for k in range(ids.shape[1]):
            if not mask[r, k]:
                continue
            out[r, rank] = start + group * ((rank - start) // group)
            if int(ids[r, k]) in boundaries:
                start = rank + 1
            rank += 1
    return out


def reference_distance(starts: np.ndarray, group: int, window: int):
    """Self-Extend's distance with ``s(t) // G`` in place of ``t // G``."""

    def distance(i, j):
        b = np.arange(starts.shape[0])[:, None, None]
        far_i = starts[b, i.astype(np.int64)] // group + window - window // group
        far_j = starts[b, j.astype(np.int64)] // group
        return np.where(i - j < window, i - j, far_i - far_j)

    return distance


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_the_formulas(family, attn):
    model = build(family, attn)
    ids, mask = left_padded()
    distance = reference_distance(unit_starts(ids, mask, set(BOUNDARIES), G), G, W)
    want = remap_reference_logits(model, family, ids, mask, distance)
    with hf_trajpe.patch(model, "self_extend_units", **OPTIONS):
        got = output(model, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], **TOL)
    plain = remap_reference_logits(model, family, ids, mask,
                                   lambda i, j: DISTANCES["self_extend"](i, j, group_size=G, window=W))
    assert not torch.allclose(got[real], plain[real], atol=1e-4)  # the units change the far positions


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_every_token_a_boundary_is_self_extend(attn):
    model = build("llama", attn)
    ids, mask = left_padded()
    with hf_trajpe.patch(model, "self_extend", group_size=G, window=W):
        plain = output(model, input_ids=ids, attention_mask=mask)
    with hf_trajpe.patch(model, "self_extend_units", group_size=G, window=W, boundary_ids=list(range(128))):
        units = output(model, input_ids=ids, attention_mask=mask)
    assert torch.equal(units, plain)


def test_units_carry_across_forwards():
    """The memory after a prompt read in two pieces (with padding) equals that of one read."""
    ids, mask = left_padded()
    boundaries = torch.tensor(BOUNDARIES)

    def read(pieces):
        memory, seen = None, torch.zeros(ids.shape[0], dtype=torch.int64)
        for lo, hi in pieces:
            real = mask[:, lo:hi].bool()
            rank = torch.where(real, real.long().cumsum(1) - 1 + seen[:, None], 0)
            memory = advance(memory, ids[:, lo:hi], rank, real, boundaries, G)
            seen = seen + real.sum(1)
        return memory

    whole, split = read([(0, 56)]), read([(0, 30), (30, 56)])
    assert torch.equal(whole.starts, split.starts) and torch.equal(whole.last_boundary, split.last_boundary)
    torch.testing.assert_close(whole.starts.double().numpy(), unit_starts(ids, mask, set(BOUNDARIES), G))


def test_cached_generation_equals_recomputation_and_beam_search():
    model = build("llama")
    ids, mask = left_padded((30, 21))
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None,
              output_scores=True, return_dict_in_generate=True)
    beams = dict(max_new_tokens=6, num_beams=3, do_sample=False, pad_token_id=0, eos_token_id=None)
    with hf_trajpe.patch(model, "self_extend_units", **OPTIONS):
        cached = model.generate(ids, use_cache=True, **kw)
        recomputed = model.generate(ids, use_cache=False, **kw)
        prompt = random_ids(24, b=2, seed=3)
        assert torch.equal(model.generate(prompt, use_cache=True, **beams),
                           model.generate(prompt, use_cache=False, **beams))
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(recomputed.scores), rtol=1e-4, atol=1e-4)


def test_left_padded_batch_equals_each_sequence_alone():
    model = build("qwen2")
    ids, mask = left_padded()
    n = ids.shape[1]
    with hf_trajpe.patch(model, "self_extend_units", **OPTIONS):
        batch = output(model, input_ids=ids, attention_mask=mask)
        for r in range(ids.shape[0]):
            length = int(mask[r].sum())
            alone = output(model, input_ids=ids[r:r + 1, n - length:])
            torch.testing.assert_close(batch[r, n - length:], alone[0], rtol=1e-4, atol=1e-5)


def test_save_reload_and_unpatch(tmp_path):
    model = build("llama")
    ids, mask = left_padded()
    stock = output(model, input_ids=ids, attention_mask=mask)
    handle = hf_trajpe.patch(model, "self_extend_units", **OPTIONS)
    want = output(model, input_ids=ids, attention_mask=mask)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "hf_trajpe_config.json").read_text())
    assert saved["scheme_options"]["boundary_ids"] == BOUNDARIES
    back = hf_trajpe.from_pretrained(tmp_path, dtype=torch.float32).eval()
    torch.testing.assert_close(output(back, input_ids=ids, attention_mask=mask), want, rtol=0, atol=0)
    handle.unpatch()
    assert torch.equal(output(model, input_ids=ids, attention_mask=mask), stock)


@pytest.mark.parametrize("options,match", [
    ({}, "boundary_ids .* is required"),
    ({"boundary_ids": []}, "non-empty list of token ids"),
    ({"boundary_ids": [3, -1]}, "non-empty list of token ids"),
    ({"boundary_ids": [True]}, "non-empty list of token ids"),
    ({"boundary_ids": [3], "group_size": 0}, "group_size"),
])
def test_options_are_checked(options, match):
    with pytest.raises(ValueError, match=match):
        hf_trajpe.patch(build("llama"), "self_extend_units", **options)


def test_needs_token_ids():
    model = build("llama")
    ids = random_ids(20)
    with hf_trajpe.patch(model, "self_extend_units", **OPTIONS), pytest.raises(ValueError, match="input_ids"):
        model(inputs_embeds=model.get_input_embeddings()(ids))


class _Tokenizer:
    """A tokenizer as ``boundary_ids`` reads one: its length, the text of each id alone, its special ids."""

    vocabulary = ["<s>", "the", " cat", ".", "\n", " sat.", "?\"", "x", ":\n", "</s>"]
    all_special_ids = [0, 9]

    def __len__(self) -> int:
        return len(self.vocabulary)

    def decode(self, ids) -> str:
        return "".join(self.vocabulary[i] for i in ids)


def test_boundary_ids_from_a_tokenizer():
    tok = _Tokenizer()
    assert boundary_ids(tok) == [3, 4, 5, 6, 8]
    assert boundary_ids(tok, ["line"]) == [4, 8]
    assert boundary_ids(tok, ["sentence"]) == [3, 5, 6]
    assert hf_trajpe.unit_boundary_ids is boundary_ids
    with pytest.raises(ValueError, match="units must be among"):
        boundary_ids(tok, ["paragraph"])


def test_unit_names_resolve_to_the_tokenizers_ids():
    """As the evaluation commands read ``--patch 'name={"boundary_ids": ["line"], ...}'``."""
    from hf_trajpe.patching.schemes.remap.units import resolve_boundary_ids

    tok = _Tokenizer()
    named = {"encoding": "self_extend_units", "boundary_ids": "line"}
    assert resolve_boundary_ids(named, tok) == {"encoding": "self_extend_units", "boundary_ids": [4, 8]}
    assert resolve_boundary_ids({"boundary_ids": ["line", "sentence"]}, tok)["boundary_ids"] == [3, 4, 5, 6, 8]
    assert resolve_boundary_ids({"boundary_ids": [4]}, tok) == {"boundary_ids": [4]}
    assert resolve_boundary_ids({"encoding": "rope"}, tok) == {"encoding": "rope"}
