"""Dynamic NTK and LongRoPE set their frequencies from the length of the whole batch (as in transformers' own
models): a padded short row beside a long one past the trained length differs from the same row alone. The
patch says so once, at the first such batch, and stays silent where rows are exact."""

from __future__ import annotations

import warnings

import pytest
import torch

import hf_trajpe

TRAINED = 32
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8, "factor": 2.0}


def llama():
    import transformers as T

    cfg = T.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=128, max_position_embeddings=TRAINED)
    torch.manual_seed(0)
    return T.LlamaForCausalLM(cfg).eval()


def run(model, n: int, pad: int):
    ids = torch.randint(3, 128, (2, n))
    mask = torch.ones_like(ids)
    mask[1, :pad] = 0
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        both = model(input_ids=ids, attention_mask=mask).logits
        model(input_ids=ids, attention_mask=mask)
        alone = model(input_ids=ids[1:, pad:]).logits
    notes = [w for w in seen if "sets its frequencies from the length of the whole batch" in str(w.message)]
    return (both[1, pad:] - alone[0]).abs().max().item(), notes


@pytest.mark.parametrize("parameters", [{"rope_type": "dynamic", "factor": 2.0}, LONGROPE], ids=["dynamic", "longrope"])
def test_a_padded_batch_past_the_trained_length_is_said_once(parameters):
    model = llama()
    hf_trajpe.patch(model, "rope", rope_parameters=parameters)
    differs, notes = run(model, 56, 40)
    assert differs > 1e-4, "the short row gets the long row's frequencies (transformers does the same)"
    assert len(notes) == 1, "said once, not at every forward"
    assert run(model, 56, 40)[1] == []


@pytest.mark.parametrize("parameters,n,pad", [
    ({"rope_type": "dynamic", "factor": 2.0}, 28, 10),  # within the trained length: every row exact
    ({"rope_type": "dynamic", "factor": 2.0}, 56, 0),  # no padding: every row the same length
    ({"rope_type": "yarn", "factor": 2.0}, 56, 40),  # a static type: rows exact at any length
], ids=["within", "unpadded", "static"])
def test_nothing_is_said_where_rows_are_exact(parameters, n, pad):
    model = llama()
    hf_trajpe.patch(model, "rope", rope_parameters=parameters)
    differs, notes = run(model, n, pad)
    assert notes == []
    if pad and parameters["rope_type"] == "yarn" or n <= TRAINED:
        assert differs < 1e-5
