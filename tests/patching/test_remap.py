"""The remap encodings (Self-Extend, ReRoPE, dual chunk attention, STRING) against float64 references written
from the papers' formulas (remap_reference.py): every family with a rotary module among the tiny test models,
eager and sdpa, left-padded, at lengths well past the window; degenerate settings give the stock model."""

from __future__ import annotations

import json

import pytest
import torch
from patch_models import build, output, random_ids
from remap_reference import DISTANCES, plain, remap_reference_logits

import hf_trajpe
import hf_trajpe.patching.schemes.remap.kernels.blocks as block_loop
import hf_trajpe.patching.schemes.remap.kernels.cpu_fused as cpu_fused

#: method -> options, each far from degenerate at the test length (56 tokens: several windows and chunks)
METHODS = {
    "self_extend": {"group_size": 3, "window": 8},
    "rerope": {"window": 10},
    "rerope/leak": {"window": 10, "leak": 2.5},
    "dca": {"chunk_size": 24, "local_window": 6},
    "string": {"shift": 12, "local_window": 4},
}
FAMILIES = ("llama", "qwen2", "gpt_neox")  # gpt_neox: a quarter of each head rotates
#: float32 model against float64 formulas
TOL = dict(rtol=1e-4, atol=1e-5)


def encoding(method: str) -> str:
    return method.split("/")[0]


def left_padded(lengths=(56, 41), seed=3) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(lengths)
    ids = torch.zeros(len(lengths), n, dtype=torch.long)
    mask = torch.zeros(len(lengths), n, dtype=torch.long)
    for r, length in enumerate(lengths):
        ids[r, n - length:] = random_ids(length, seed=seed + r)[0]
        mask[r, n - length:] = 1
    return ids, mask


def distance(method: str, options: dict | None = None):
    options = METHODS[method] if options is None else options
    return lambda i, j: DISTANCES[encoding(method)](i, j, **options)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_the_formulas(family, attn, method):
    model = build(family, attn)
    ids, mask = left_padded()
    want = remap_reference_logits(model, family, ids, mask, distance(method))
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]):
        got = output(model, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], **TOL)
    stock = output(model, input_ids=ids, attention_mask=mask)
    assert not torch.allclose(got[real], stock[real], atol=1e-3)  # the remap changes the outputs


DEGENERATE = [  # each gives every pair its true distance at the test length (40 tokens)
    ("self_extend", {"group_size": 1, "window": 4}),
    ("self_extend", {"group_size": 4, "window": 40}),
    ("rerope", {"window": 40}),
    ("rerope", {"window": 64, "leak": 3.0}),
    ("dca", {"chunk_size": 40, "local_window": 10}),
    ("dca", {"chunk_size": 100, "local_window": 12}),
    ("string", {"shift": 0, "local_window": 8}),
]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_degenerate_settings_give_the_stock_model(family, attn):
    """Another attention path runs (blockwise, per region), so equal up to float32 rounding: 1e-5."""
    model = build(family, attn)
    ids, mask = left_padded((40, 29))
    stock = output(model, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    for name, options in DEGENERATE:
        with hf_trajpe.patch(model, name, **options):
            got = output(model, input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(got[real], stock[real], rtol=1e-5, atol=1e-5, msg=f"{name} {options}")


def test_blocks_of_queries_equal_one_block(monkeypatch):
    model = build("llama")
    ids, mask = left_padded()
    with hf_trajpe.patch(model, "dca", **METHODS["dca"]):
        whole = output(model, input_ids=ids, attention_mask=mask)
        monkeypatch.setattr(block_loop, "SCORE_BUDGET", 1)  # 16 queries per block: 4 blocks
        assert block_loop.block_size(2, 4, 56) == 16
        blocks = output(model, input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(blocks, whole, rtol=1e-6, atol=1e-6)


# -- composition -------------------------------------------------------------------------------------
def test_self_extend_over_yarn_uses_yarn_frequencies():
    """The rotation's frequencies and attention factor are YaRN's (transformers' module built from the extended
    config), the positions Self-Extend's."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    model = build("llama", max_position_embeddings=32)
    ids, mask = left_padded()
    yarn = {"rope_type": "yarn", "factor": 4.0}
    config = type(model.config).from_dict(model.config.to_dict())
    config.rope_parameters = {**yarn, "rope_theta": model.config.rope_parameters["rope_theta"],
                              "original_max_position_embeddings": 32}
    config.max_position_embeddings = 128
    rotary = LlamaRotaryEmbedding(config)
    assert rotary.attention_scaling != 1.0
    want = remap_reference_logits(model, "llama", ids, mask, distance("self_extend"), rotary=rotary)
    with hf_trajpe.patch(model, "self_extend", rope_parameters=yarn, **METHODS["self_extend"]):
        assert model.config.max_position_embeddings == 128
        got = output(model, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], **TOL)


def test_layer_selection_remaps_those_layers_only():
    model = build("gpt_neox")
    ids, mask = left_padded()
    want = remap_reference_logits(model, "gpt_neox", ids, mask, plain, layers={1: distance("string")})
    with hf_trajpe.patch(model, "string", layers=[1], **METHODS["string"]):
        got = output(model, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], **TOL)


@pytest.mark.parametrize("model_type", ["mistral", "qwen3", "gemma", "gemma2", "phi", "gemma3_text", "olmo3"])
def test_other_rotary_families_run_and_degenerate_to_stock(model_type):
    """Gemma 2: logits soft-capped in attention; Gemma 3 and OLMo 3: local and global layers rotate with their
    own frequencies, remapped alike."""
    from hf_trajpe.coverage.tiny import tiny_model

    model = tiny_model(model_type)
    ids = random_ids(30, b=2)
    stock = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "rerope", window=64):
        torch.testing.assert_close(output(model, input_ids=ids), stock, rtol=1e-5, atol=1e-5)
    with hf_trajpe.patch(model, "self_extend", group_size=2, window=4):
        assert not torch.allclose(output(model, input_ids=ids), stock, atol=1e-4)


# -- the KV cache, generation, padding ------------------------------------------------------------------
@pytest.mark.parametrize("method", list(METHODS))
def test_cached_generation_equals_recomputation_past_the_window(method):
    """Greedy generate() with the KV cache (each key stored rotated once per key rotation) equals use_cache=False,
    from a left-padded prompt longer than the window, 12 new tokens."""
    model = build("llama")
    ids, mask = left_padded((30, 21))
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None,
              output_scores=True, return_dict_in_generate=True)
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]):
        cached = model.generate(ids, use_cache=True, **kw)
        recomputed = model.generate(ids, use_cache=False, **kw)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(recomputed.scores), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["self_extend", "dca"])
def test_left_padded_batch_equals_each_sequence_alone(method):
    model = build("qwen2")
    ids, mask = left_padded()
    n = ids.shape[1]
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]):
        batch = output(model, input_ids=ids, attention_mask=mask)
        for r in range(ids.shape[0]):
            length = int(mask[r].sum())
            alone = output(model, input_ids=ids[r:r + 1, n - length:])
            torch.testing.assert_close(batch[r, n - length:], alone[0], rtol=1e-4, atol=1e-5)


def test_gradients_flow_through_every_region():
    """A training step through the remapped attention (rotations of q and k per region, blockwise)."""
    model = build("llama").train()
    ids, mask = left_padded()
    with hf_trajpe.patch(model, "dca", **METHODS["dca"]):
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    for name in ("q_proj", "k_proj", "v_proj"):
        grad = getattr(model.model.layers[1].self_attn, name).weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


# -- save, reload, unpatch ----------------------------------------------------------------------------------
def test_save_reload_and_unpatch(tmp_path):
    model = build("llama")
    ids, mask = left_padded()
    stock = output(model, input_ids=ids, attention_mask=mask)
    keys = list(model.state_dict())
    handle = hf_trajpe.patch(model, "dca", local_window=6, rope_parameters={"rope_type": "linear", "factor": 2.0})
    # 3/4 of the length the rotation is extended to (2 x 128)
    assert handle.config.scheme_options == {"chunk_size": 192, "local_window": 6}
    assert handle.plan.describe() == "dca (chunk_size=192, local_window=6)"
    want = output(model, input_ids=ids, attention_mask=mask)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "hf_trajpe_config.json").read_text())
    assert saved["scheme_options"] == {"chunk_size": 192, "local_window": 6}
    assert saved["rope_parameters"] == handle.config.rope_parameters and saved["rope_parameters"]["factor"] == 2.0
    back = hf_trajpe.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert hf_trajpe.get_handle(back).config == handle.config
    torch.testing.assert_close(output(back, input_ids=ids, attention_mask=mask), want, rtol=0, atol=0)
    handle.unpatch()
    assert torch.equal(output(model, input_ids=ids, attention_mask=mask), stock)
    assert list(model.state_dict()) == keys and model.config._attn_implementation == "sdpa"
    assert model.config.max_position_embeddings == 128


def test_defaults_follow_the_reference_code():
    model = build("llama", max_position_embeddings=4096)
    expected = {"self_extend": {"group_size": 8, "window": 1024}, "rerope": {"window": 512, "leak": None},
                "dca": {"chunk_size": 3072, "local_window": 512}, "string": {"shift": 1351, "local_window": 128}}
    for name, options in expected.items():
        with hf_trajpe.patch(model, name) as handle:
            assert handle.config.scheme_options == options
    with hf_trajpe.patch(build("llama"), "string") as handle:  # trained on 128: the window is half the shift
        assert handle.config.scheme_options == {"shift": 42, "local_window": 21}


# -- refusals ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,options,match", [
    ("self_extend", {"window": 0}, r"window must be an integer >= 1 \(the nearest distances, kept exact\)"),
    ("self_extend", {"group_size": 0.5}, r"group_size \(self_extend\) must be an integer >= 1"),
    ("rerope", {"window": 0}, r"window must be an integer >= 1"),
    ("dca", {"local_window": -1}, r"local_window must be an integer >= 0"),
    ("dca", {"chunk_size": 1}, r"chunk_size \(dca\) must be an integer >= 2"),
    ("rerope", {"leak": 0.5}, r"leak \(rerope\) must be a number >= 1"),
    ("dca", {"chunk_size": 200}, r"chunk_size \(dca\) must not exceed the trained length 128"),
    ("dca", {"chunk_size": 24, "local_window": 24}, r"local_window \(dca\) must be smaller than chunk_size"),
    ("string", {"shift": 8, "local_window": 8}, r"local_window \(string\) must be smaller than shift"),
    ("string", {"local_window": 50}, r"local_window \(string\) must be smaller than shift.*shift=42"),  # 0.33 x 128
    ("string", {"shift": -1}, r"shift \(string\) must be an integer >= 0"),
])
def test_options_are_checked(name, options, match):
    model = build("llama")
    with pytest.raises(ValueError, match=match):
        hf_trajpe.patch(model, name, **options)
    assert "hf_trajpe" not in model._modules


def test_refused_without_a_rotary_module_and_on_flex():
    for family in ("gpt2", "bert"):
        with pytest.raises(ValueError, match="does not support encoding 'self_extend'"):
            hf_trajpe.patch(build(family), "self_extend")
    with pytest.raises(NotImplementedError, match="flex score_mod"):
        hf_trajpe.patch(build("llama", "flex_attention"), "rerope")
    with pytest.raises(NotImplementedError, match="fixed rotary frequencies"):
        hf_trajpe.patch(build("llama"), "rerope", rope_parameters={"rope_type": "dynamic", "factor": 2.0})


@pytest.mark.parametrize("encoding,options,match", [
    ("rope", {"group_size": 2},
     r"option\(s\) group_size apply only to encoding='self_extend' or encoding='self_extend_units', not 'rope'"),
    ("dca", {"window": 8}, r"option\(s\) window apply only to encoding='self_extend', encoding='rerope', or "
                           r"encoding='self_extend_units', not 'dca'"),
    ("rerope", {"local_window": 4}, r"local_window apply only to encoding='string' or encoding='dca', not 'rerope'"),
    ("native", {"shift": 4}, r"option\(s\) shift apply only to encoding='string', not 'native'"),
    ("trajectory", {"base": "rope", "leak": 2.0}, r"leak apply only to encoding='rerope', not 'trajectory' on 'rope'"),
    ("self_extend", {"rotary_fraction": 0.5}, r"rotary_fraction applies only where a rotation is applied"),
    ("string", {"rope_theta": 5e5}, r"rope_theta applies only where a rotation is applied"),
    ("alibi", {"rope_parameters": {"rope_type": "linear", "factor": 2.0}},
     r"rope_parameters extends a rotary encoding: give it with .*encoding='self_extend'.*not 'alibi'"),
])
def test_options_of_another_encoding_are_refused(encoding, options, match):
    """A remap's options belong to it (whatever their value), and a remap takes rope's rope_parameters only: it
    rotates with the model's own rotary module (rope_theta, rotary_fraction would be ignored)."""
    with pytest.raises(ValueError, match=match):
        hf_trajpe.patch(build("llama"), encoding, **options)


def test_nope_layers_stay_without_positions():
    """SmolLM3 drops RoPE on some layers (``no_rope_layers``): a remap changes only the layers that rotate."""
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    cfg = SmolLM3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, no_rope_layers=[0, 0], pad_token_id=0,
                        bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = SmolLM3ForCausalLM(cfg).eval()
    ids = random_ids(30, b=2)
    stock = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "self_extend", group_size=2, window=4):  # no layer rotates: nothing to remap
        torch.testing.assert_close(output(model, input_ids=ids), stock, rtol=1e-5, atol=1e-5)


def test_a_model_rotating_some_layers_in_its_own_code_takes_those_layers_only():
    """Flint rotates its sliding-window layers only (a condition in its attention's code): a remap of every layer
    is refused naming the layers that rotate; on those layers it runs, with the attention sinks kept."""
    from hf_trajpe.coverage.tiny import tiny_model

    model = tiny_model("flint")
    model.config.layer_types = ["sliding_attention", "full_attention"]
    model.config.sliding_window = 64
    model.model.layers[0].self_attn.sliding_window = 64
    ids = random_ids(30, b=2)
    stock = output(model, input_ids=ids)
    with pytest.raises(NotImplementedError, match=r"only if self.sliding_window is not None.*rotates layers 0"):
        hf_trajpe.patch(model, "rerope", window=64)
    with hf_trajpe.patch(model, "rerope", window=64, layers=[0]):  # degenerate: the stock model
        torch.testing.assert_close(output(model, input_ids=ids), stock, rtol=1e-5, atol=1e-5)
    with hf_trajpe.patch(model, "rerope", window=4, layers=[0]):
        assert not torch.allclose(output(model, input_ids=ids), stock, atol=1e-4)


# -- the attention's two paths ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", [*METHODS, "string/defaults"])
def test_regions_do_not_decrease_with_the_query_position(method):
    """The fused path reads the regions a block of queries meets from its smallest and largest position: for
    every key, a later query never falls in an earlier region (RemapScheme.region_index)."""
    options = {} if method.endswith("/defaults") else METHODS[method]
    with hf_trajpe.patch(build("llama"), encoding(method), **options) as handle:
        scheme = handle.state.scheme
    positions = torch.arange(300, dtype=torch.float32)
    region = scheme.region_index(positions[None, :, None], positions[None, None, :])[0]  # [query, key]
    assert (region[1:] >= region[:-1]).all()
    assert len(region.unique()) > 1  # several regions: the check is not vacuous


@pytest.mark.parametrize("method", list(METHODS))
def test_fused_segments_equal_the_materialised_scores(monkeypatch, method):
    """Without autograd on the CPU the attention runs per segment of keys through the fused kernel, merged by
    log-sum-exp; it equals the path that builds every score (autograd, dropout, soft-capping, other devices),
    on a left-padded batch (pads included) and on one sequence, in 16-query blocks, with runs of keys scored
    without a mask from 4 keys on."""
    model = build("llama")
    ids, mask = left_padded()
    inputs = [dict(input_ids=ids, attention_mask=mask), dict(input_ids=ids[:1])]
    monkeypatch.setattr(block_loop, "SCORE_BUDGET", 1)
    monkeypatch.setattr(cpu_fused, "PURE_RUN", 4)
    calls = []
    fused = cpu_fused.segment_attention
    monkeypatch.setattr(cpu_fused, "segment_attention", lambda *a, **k: calls.append(a[3]) or fused(*a, **k))
    with hf_trajpe.patch(model, encoding(method), **METHODS[method]):
        got = []
        for kwargs in inputs:
            calls.clear()
            got.append(output(model, **kwargs))
            assert calls
        assert any(seg.pairs is None for segs in calls for seg in segs)  # one sequence: unmasked runs were scored
        monkeypatch.setattr(cpu_fused.CpuFused, "refusal", lambda self, call: "switched off")
        calls.clear()
        want = [output(model, **kwargs) for kwargs in inputs]
        assert not calls
    # every position, padding too: a query that sees no key gets the mean of all values on both paths (as the
    # softmax of equal scores gives), which the loss reads at the last pad (it predicts the first token)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
