"""The remaps' FlexAttention kernel on a CUDA GPU (``make test-gpu``: ``pytest -m gpu``): ``kernel="auto"`` takes it
there; it equals the materialised scores in float32 (forward, padded batch, cached greedy decoding) and within
the model's own bf16 error in bfloat16; gradients through it (training with a remap) equal the materialised
path's. Skipped, with the reason, without CUDA; never part of ``make test``."""

from __future__ import annotations

import pytest
import torch

import hf_trajpe

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make test-gpu on one)")]

METHODS = {
    "self_extend": {"group_size": 4, "window": 64},
    "rerope": {"window": 64},
    "dca": {"chunk_size": 192, "local_window": 32},
    "string": {"shift": 96, "local_window": 16},
}


def _llama(dtype=torch.float32):
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=dtype).cuda().eval()


def _batch(n: int = 1000):
    torch.manual_seed(1)
    ids = torch.randint(3, 256, (2, n), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :300] = 0
    return ids, mask


def _logits(model, method: str, kernel: str, **inputs) -> torch.Tensor:
    with hf_trajpe.patch(model, method, kernel=kernel, **METHODS[method]) as handle, torch.no_grad():
        out = model(**inputs).logits.float()
        assert handle.kernel == kernel
    return out


@pytest.mark.parametrize("method", list(METHODS))
def test_flex_equals_the_materialised_scores_on_the_gpu(method):
    model = _llama()
    ids, mask = _batch()
    want = _logits(model, method, "materialised", input_ids=ids, attention_mask=mask)
    got = _logits(model, method, "flex", input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-4, atol=1e-4)
    with hf_trajpe.patch(model, method, **METHODS[method]) as handle, torch.no_grad():
        model(input_ids=ids[:1])
        assert handle.kernel == "flex"  # auto on CUDA


@pytest.mark.parametrize("method", ["self_extend", "dca"])
def test_flex_in_bf16_stays_within_the_models_own_bf16_error(method):
    """bf16 through flex against float32 through the materialised scores: no further than the stock model's own
    bf16 logits are from its float32 ones (twice that, for the merge of two or three partial softmaxes)."""
    ids, mask = _batch()
    real = mask.bool()
    f32, bf16 = _llama(), _llama(torch.bfloat16)
    with torch.no_grad():
        stock_err = (bf16(input_ids=ids, attention_mask=mask).logits.float()
                     - f32(input_ids=ids, attention_mask=mask).logits)[real].abs().max()
    want = _logits(f32, method, "materialised", input_ids=ids, attention_mask=mask)
    got = _logits(bf16, method, "flex", input_ids=ids, attention_mask=mask)
    assert (got - want)[real].abs().max() <= 2 * stock_err


@pytest.mark.parametrize("method", list(METHODS))
def test_cached_greedy_decoding_through_flex_on_the_gpu(method):
    model = _llama()
    ids, mask = _batch(400)
    outs = {}
    for kernel in ("materialised", "flex"):
        with hf_trajpe.patch(model, method, kernel=kernel, **METHODS[method]):
            outs[kernel] = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8,
                                          do_sample=False, pad_token_id=0, output_scores=True,
                                          return_dict_in_generate=True)
    assert torch.equal(outs["flex"].sequences, outs["materialised"].sequences)
    torch.testing.assert_close(torch.stack(outs["flex"].scores), torch.stack(outs["materialised"].scores),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["self_extend", "dca"])
def test_gradients_through_flex_equal_the_materialised_ones(method):
    ids, mask = _batch(600)
    grads = {}
    for kernel in ("materialised", "flex"):
        model = _llama()
        model.train()
        with hf_trajpe.patch(model, method, kernel=kernel, **METHODS[method]) as handle:
            loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
            loss.backward()
            assert handle.kernel == kernel
        grads[kernel] = (loss.detach(), [p.grad.detach().clone() for p in model.parameters()])
    torch.testing.assert_close(grads["flex"][0], grads["materialised"][0], rtol=1e-4, atol=1e-5)
    for got, want in zip(grads["flex"][1], grads["materialised"][1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)
