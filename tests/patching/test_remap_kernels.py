"""The kernels of the remaps (schemes/remap/kernels/): FlexAttention per region, the fused CPU segments and the
materialised scores give the same attention, on three families, padded, past the window, over YaRN, on a layer
selection, in cached greedy and beam decoding and across the KV cache's room past 1,024 tokens; the ``kernel``
option chooses among them, ``auto`` by the list, and a kernel that cannot run an input is refused with the reason."""

from __future__ import annotations

import json

import pytest
import torch
from patch_models import build, output, random_ids
from test_remap import FAMILIES, METHODS, encoding, left_padded

import hf_trajpe
from hf_trajpe.patching.schemes.remap import KERNEL_NAMES
from hf_trajpe.patching.schemes.remap.kernels.flex import flex_available

pytestmark = pytest.mark.skipif(not flex_available(), reason="this torch has no FlexAttention with its lse")

#: float32, three ways of summing the same softmax
TOL = dict(rtol=1e-5, atol=1e-5)
UNITS = {"group_size": 3, "window": 8, "boundary_ids": [5, 17, 40, 77]}
ALL = {**METHODS, "self_extend_units": UNITS}


def forward_with(model, method: str, kernel: str, inputs: dict, **extra) -> torch.Tensor:
    with hf_trajpe.patch(model, encoding(method), kernel=kernel, **ALL[method], **extra) as handle:
        out = output(model, **inputs)
        assert handle.kernel == kernel
    return out


@pytest.mark.parametrize("method", list(ALL))
@pytest.mark.parametrize("family", FAMILIES)
def test_flex_equals_the_materialised_scores(family, method):
    """Every position of a left-padded batch (pads included: a query that sees no key gets the mean of all values
    on every path) and of one sequence with no mask; the fused CPU kernel alike."""
    model = build(family)
    ids, mask = left_padded()
    for inputs in (dict(input_ids=ids, attention_mask=mask), dict(input_ids=ids[:1])):
        want = forward_with(model, method, "materialised", inputs)
        torch.testing.assert_close(forward_with(model, method, "flex", inputs), want, **TOL)
        torch.testing.assert_close(forward_with(model, method, "cpu_fused", inputs), want, **TOL)


@pytest.mark.parametrize("extra", [{"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, {"layers": [1]}],
                         ids=["yarn", "layer_selection"])
@pytest.mark.parametrize("method", ["self_extend", "dca", "string"])
def test_flex_over_yarn_and_on_a_layer_selection(method, extra):
    model = build("llama")
    ids, mask = left_padded()
    inputs = dict(input_ids=ids, attention_mask=mask)
    want = forward_with(model, method, "materialised", inputs, **extra)
    torch.testing.assert_close(forward_with(model, method, "flex", inputs, **extra), want, **TOL)


def generate_with(model, method: str, kernel: str, ids, mask, **kwargs):
    with hf_trajpe.patch(model, encoding(method), kernel=kernel, **ALL[method]) as handle:
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, pad_token_id=0,
                             output_scores=True, return_dict_in_generate=True, **kwargs)
        assert handle.kernel == kernel
    return out


#: the decoding test in the default run: one method per kind of key rotation (two copies, one copy, units); the
#: others with the slow tests
DECODED = [m if m in ("self_extend", "dca", "string") else pytest.param(m, marks=pytest.mark.slow) for m in ALL]


@pytest.mark.parametrize("method", DECODED)
def test_cached_greedy_and_beam_decoding_through_flex(method):
    """The decoding step (one query against the KV cache, keys stored rotated) through FlexAttention: greedy on a
    left-padded batch and beam search, the same tokens and scores as the materialised scores."""
    model = build("qwen2")
    ids, mask = left_padded((30, 19))
    for kwargs in (dict(max_new_tokens=6, min_new_tokens=6), dict(max_new_tokens=5, min_new_tokens=5, num_beams=3)):
        want = generate_with(model, method, "materialised", ids, mask, **kwargs)
        got = generate_with(model, method, "flex", ids, mask, **kwargs)
        assert torch.equal(got.sequences, want.sequences)
        torch.testing.assert_close(torch.stack(got.scores), torch.stack(want.scores), **TOL)


@pytest.mark.parametrize("method", ["self_extend", "dca"])
def test_flex_across_the_cache_room_past_1024_tokens(method):
    """Past 1,024 cached tokens a decoding step writes into the cache's room (cache_room.py): the flex kernel
    reads the views of the room as the materialised one does."""
    model = build("gpt_neox")
    ids = random_ids(1030, seed=4)
    mask = torch.ones_like(ids)
    want = generate_with(model, method, "materialised", ids, mask, max_new_tokens=4, min_new_tokens=4)
    got = generate_with(model, method, "flex", ids, mask, max_new_tokens=4, min_new_tokens=4)
    assert torch.equal(got.sequences, want.sequences)
    torch.testing.assert_close(torch.stack(got.scores), torch.stack(want.scores), **TOL)


def test_soft_capped_logits_and_sinks_through_flex():
    """Gemma 2 caps its attention logits (a score_mod in FlexAttention); Flint's attention has a learned sink logit
    per head (one more term of the merged log-sum-exp)."""
    from hf_trajpe.coverage.tiny import tiny_model

    ids = random_ids(40, b=2)
    gemma = tiny_model("gemma2")
    assert gemma.config.attn_logit_softcapping
    for kernel in ("materialised", "flex"):
        with hf_trajpe.patch(gemma, "self_extend", group_size=2, window=6, kernel=kernel):
            if kernel == "materialised":
                want = output(gemma, input_ids=ids)
            else:
                torch.testing.assert_close(output(gemma, input_ids=ids), want, **TOL)
    with pytest.raises(NotImplementedError, match="kernel='cpu_fused' cannot run this attention: it cannot soft-cap"):
        with hf_trajpe.patch(gemma, "self_extend", group_size=2, window=6, kernel="cpu_fused"):
            output(gemma, input_ids=ids)
    flint = tiny_model("flint")
    flint.config.layer_types = ["sliding_attention", "full_attention"]
    flint.config.sliding_window = 64
    flint.model.layers[0].self_attn.sliding_window = 64
    outs = {}
    for kernel in KERNEL_NAMES:
        with hf_trajpe.patch(flint, "rerope", window=4, layers=[0], kernel=kernel):
            outs[kernel] = output(flint, input_ids=ids)
    torch.testing.assert_close(outs["flex"], outs["materialised"], **TOL)
    torch.testing.assert_close(outs["cpu_fused"], outs["materialised"], **TOL)


# -- the option ------------------------------------------------------------------------------------------------
def test_auto_takes_the_first_kernel_of_the_list_that_runs_the_input():
    """On the CPU: the fused kernel without autograd; with autograd the materialised scores (the fused kernel's
    lse has no gradient, FlexAttention has no CPU backward)."""
    model = build("llama")
    ids = random_ids(30)
    with hf_trajpe.patch(model, "dca", chunk_size=12, local_window=3) as handle:
        assert handle.kernel is None  # before any forward
        output(model, input_ids=ids)
        assert handle.kernel == "cpu_fused"
        model(input_ids=ids).logits.sum().backward()
        assert handle.kernel == "materialised"


@pytest.mark.parametrize("kernel,why", [("flex", "no FlexAttention backward on the CPU"),
                                        ("cpu_fused", "its log-sum-exp has no gradient")])
def test_a_kernel_named_for_an_input_it_cannot_run_is_refused_with_the_reason(kernel, why):
    model = build("llama")
    with hf_trajpe.patch(model, "self_extend", group_size=2, window=4, kernel=kernel):
        with pytest.raises(NotImplementedError, match=rf"kernel='{kernel}' cannot run this attention: .*{why}"):
            model(input_ids=random_ids(20)).logits.sum().backward()


def test_the_kernel_option_is_checked_and_not_saved(tmp_path):
    model = build("llama")
    with pytest.raises(ValueError, match=r"kernel \(remaps\) must be one of 'auto', 'cpu_fused', 'flex'"):
        hf_trajpe.patch(model, "dca", kernel="triton")
    with pytest.raises((TypeError, ValueError), match="kernel"):
        hf_trajpe.patch(model, "rope", kernel="flex")  # not an option of a scheme without kernels
    auto = hf_trajpe.patch(model, "string", shift=12, local_window=4)
    described = auto.state.describe()
    auto.unpatch()
    handle = hf_trajpe.patch(model, "string", shift=12, local_window=4, kernel="flex")
    assert handle.state.describe() == described  # the same patch, read by another kernel (a cache carries over)
    ids = random_ids(30)
    want = output(model, input_ids=ids)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "hf_trajpe_config.json").read_text())
    assert "kernel" not in json.dumps(saved)
    reloaded = hf_trajpe.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(output(reloaded, input_ids=ids), want, **TOL)
    assert hf_trajpe.get_handle(reloaded).kernel == "cpu_fused"  # auto again


@pytest.mark.parametrize("sinks", [False, True])
def test_the_merge_by_log_sum_exp_is_exact_and_differentiable(sinks):
    """What the fused kernels merge (per key segment: the softmax over it and its log-sum-exp) is the softmax over
    all keys, with a sink logit per head where given, and its gradient is that of the one softmax (FlexAttention
    trains through the merge on CUDA)."""
    from hf_trajpe.patching.schemes.remap.kernels.base import merge_by_lse

    torch.manual_seed(0)
    b, g, rep, n, d = 2, 2, 2, 5, 4
    scores = [torch.randn(b, g, rep * n, w, dtype=torch.float64, requires_grad=True) for w in (3, 6)]
    values = [torch.randn(b, g, w, d, dtype=torch.float64) for w in (3, 6)]
    sink = torch.randn(g * rep, dtype=torch.float64) if sinks else None
    outs = [torch.softmax(s, dim=-1) @ v for s, v in zip(scores, values, strict=True)]
    lses = [torch.logsumexp(s, dim=-1) for s in scores]
    merged = merge_by_lse(outs, lses, torch.float64, sink, rep)
    every = torch.cat(scores, dim=-1)
    if sinks:
        column = sink.reshape(1, g, rep, 1, 1).expand(b, g, rep, n, 1).reshape(b, g, rep * n, 1)
        every = torch.cat((every, column), dim=-1)
    weights = torch.softmax(every, dim=-1)[..., :9]
    want = weights @ torch.cat(values, dim=2)
    torch.testing.assert_close(merged, want)
    grads = torch.autograd.grad(merged.square().sum(), scores)
    wants = torch.autograd.grad(want.square().sum(), scores)
    for got, ref in zip(grads, wants, strict=True):
        torch.testing.assert_close(got, ref)
