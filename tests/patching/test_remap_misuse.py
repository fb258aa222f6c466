"""Misuses of a remap that are said, not silently given a wrong or empty answer: attention weights asked of a
remap (it never builds them whole), and unit boundaries that no token of the model can be."""

from __future__ import annotations

import warnings

import pytest
import torch
from patch_models import build, random_ids

import hf_trajpe


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_output_attentions_with_a_remap_warns_that_it_has_none(attn):
    """The stock eager model returns the weights; a remap returns none (``()``), and says why and what to do."""
    model = build("llama", attn)
    ids = random_ids(12)
    with hf_trajpe.patch(model, "self_extend", group_size=2, window=4), torch.no_grad():
        with pytest.warns(UserWarning, match=r"output_attentions.*remap.*never builds.*weights.*without the patch"):
            out = model(input_ids=ids, output_attentions=True)
        assert out.attentions == ()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model(input_ids=ids)  # not asked: no word


def test_output_attentions_set_on_the_config_warns_too():
    model = build("llama", "eager")
    model.config.output_attentions = True
    with hf_trajpe.patch(model, "rerope", window=6), torch.no_grad():
        with pytest.warns(UserWarning, match=r"output_attentions.*remap"):
            model(input_ids=random_ids(12))


def test_boundary_ids_outside_the_vocabulary_are_refused_naming_the_option():
    """An id past the model's vocabulary never ends a unit: the patch would silently be plain Self-Extend."""
    model = build("llama")
    vocab = model.get_input_embeddings().num_embeddings
    with pytest.raises(ValueError, match=rf"boundary_ids \(self_extend_units\).*\[{vocab + 3}\].*outside.*"
                                         rf"vocabulary of {vocab} tokens.*unit_boundary_ids\(tokenizer\)"):
        hf_trajpe.patch(model, "self_extend_units", group_size=2, window=4, boundary_ids=[5, vocab + 3])
    assert hf_trajpe.get_handle(model) is None  # refused before any change
    hf_trajpe.patch(model, "self_extend_units", group_size=2, window=4, boundary_ids=[5, vocab - 1]).unpatch()
