"""Activation checkpointing on patched models (patching/checkpointing.py): the gradients of a checkpointed model
equal those of the same model without checkpointing, reentrant or not, for patches of every layer and layer
selections, and whatever forward ran between a forward and its backward."""

from __future__ import annotations

import warnings

import pytest
import torch

import hf_trajpe

PATCHES = {
    "trajectory": ("trajectory", {"base": "rope", "strength": 0.3}),
    "trajectory-alibi": ("trajectory", {"base": "alibi", "strength": 0.3}),
    "rope": ("rope", {}),
    "alibi": ("alibi", {}),
    "trajectory-layers": ("trajectory", {"base": "rope", "strength": 0.3, "layers": "0,2"}),
    "rope-layers": ("rope", {"layers": "1"}),
    "alibi-layers": ("alibi", {"layers": "1-2"}),
    "dca": ("dca", {"chunk_size": 8, "local_window": 2}),  # (a remap: rotations inside attention, per region)
    "self_extend-layers": ("self_extend", {"group_size": 2, "window": 4, "layers": "1"}),
    "layer-map": ({"0": {"encoding": "trajectory", "base": "rope", "strength": 0.3}, "1": "alibi",
                   "2": {"encoding": "rope", "rotary_fraction": 0.5}}, {}),
}


def llama(patch):
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float64)
    encoding, options = patch
    hf_trajpe.patch(model, encoding, **options)
    return model.train()


def batch(seed: int, n: int = 12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 96, (2, n), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # a left-padded row
    return ids, mask


def gradients(model, batches) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    losses = [model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
              for ids, mask in batches]  # every forward first, then one backward
    sum(losses).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert grads, "the loss reached the parameters"
    return grads


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("name", list(PATCHES))
def test_checkpointed_gradients_equal_plain_ones(name, reentrant):
    model = llama(PATCHES[name])
    batches = [batch(1), batch(2, n=9)]
    want = gradients(model, batches)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # gradient_checkpointing_enable's deprecation
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    got = gradients(model, batches)
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-9, atol=1e-12, msg=key)
    assert model.model.layers[0]._gradient_checkpointing_func.keywords["use_reentrant"] is reentrant, \
        "the model's own checkpoint function is back after the forward"
