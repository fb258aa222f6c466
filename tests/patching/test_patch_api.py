"""PatchConfig, errors, save/reload, PEFT, Trainer, auto strength and the displacement cache."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
from patch_models import build, output, random_ids

import hf_trajpe
from hf_trajpe.patching import CONFIG_NAME, PatchConfig, get_handle
from hf_trajpe.patching.persistence import SAVE_ID_KEY, resolved_config


# -- config ---------------------------------------------------------------------------------------
def test_config_validates_and_names_what_is_supported():
    encodings = ("native, sinusoidal, rope, alibi, none, cope, self_extend, rerope, string, dca, self_extend_units, "
                 "trajectory")
    with pytest.raises(ValueError, match=encodings):
        PatchConfig("xpos")
    with pytest.raises(ValueError, match="supported bases"):
        PatchConfig("trajectory", base="xpos")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        PatchConfig("trajectory", strength=1.5)
    with pytest.raises(ValueError, match="only to encoding='trajectory'"):
        PatchConfig("rope", strength=0.3)
    with pytest.raises(ValueError, match="beta"):
        PatchConfig("trajectory", beta=0.0)
    with pytest.raises(ValueError, match="linear or cubic"):
        PatchConfig("trajectory", base="learned", interpolation="exact")
    with pytest.raises(ValueError, match="learnable"):
        PatchConfig("trajectory", strength="auto", learnable_strength=True)
    with pytest.raises(ValueError, match="max_positions"):
        PatchConfig("rope", max_positions=0)


@pytest.mark.parametrize("encoding,options,match", [
    # an option of another encoding is refused at any value, its default included, naming the option, the
    # encoding asked for, and the encodings that take it
    ("native", {"strength": 0.2}, r"option\(s\) strength apply only to encoding='trajectory', not 'native'"),
    ("native", {"beta": 2.0}, r"option\(s\) beta apply only to encoding='trajectory', not 'native'"),
    ("cope", {"strength": 0.2}, r"option\(s\) strength apply only to encoding='trajectory', not 'cope'"),
    ("rope", {"strength": 0.2, "cache": False}, r"option\(s\) strength, cache apply only to encoding='trajectory'"),
    ("rope", {"sinusoid_scale": 1.0}, r"sinusoid_scale applies only to encoding='sinusoidal' or trajectory with "
                                      r"base='sinusoidal', not 'rope'"),
    ("trajectory", {"base": "alibi", "rope_theta": 10000.0},
     r"rope_theta applies only where a rotation is applied \(encoding='rope', 'native' on a model whose own "
     r"scheme is rope, or trajectory with base='rope'\); 'trajectory' on 'alibi' sets no rotation of its own"),
    ("alibi", {"npos_max": 64}, r"option\(s\) npos_max apply only to encoding='cope', not 'alibi'"),
])
def test_options_of_another_encoding_are_refused_whatever_their_value(encoding, options, match):
    with pytest.raises(ValueError, match=match):
        PatchConfig(encoding, **options)
    model = build("llama")
    with pytest.raises(ValueError, match=match):
        hf_trajpe.patch(model, encoding, **options)
    assert get_handle(model) is None


def test_options_of_the_models_own_scheme_are_checked_against_the_model():
    """``native`` and trajectory on the model's own scheme take the options of the scheme a model can have as its
    own (rope's), checked when the model is known; a value equal to the default is still refused there."""
    assert PatchConfig("native", rope_theta=10000.0).options == {"rope_theta": 10000.0}
    gpt2 = build("gpt2")
    for encoding in ("native", "trajectory"):
        with pytest.raises(ValueError, match=f"rope_theta applies only where a rotation is applied .*; '{encoding}' "
                                             r"\(this patch runs .*'learned', GPT2's own scheme\) sets no rotation "
                                             "of its own"):
            hf_trajpe.patch(gpt2, encoding, rope_theta=10000.0)
    with hf_trajpe.patch(build("llama"), "native", rotary_fraction=0.5) as handle:  # rope takes it
        assert handle.config.rotary_fraction == 0.5


def test_each_option_is_declared_by_the_encodings_that_take_it():
    """Where an option lives: trajectory's in trajectory, the base's in the base; ``config.<option>`` reads the
    options mapping (an option the encoding does not take reads as its default)."""
    from hf_trajpe.patching.schemes import SCHEMES, SOURCES, declared_options

    assert {o.name for o in SOURCES["trajectory"].options} == {
        "base", "strength", "learnable_strength", "beta", "interpolation", "detach", "cache", "cache_size", "extend"}
    assert {o.name for o in SCHEMES["rope"].options} == {"rope_theta", "rope_parameters", "rotary_fraction"}
    assert {o.name for o in SCHEMES["sinusoidal"].options} == {"sinusoid_scale"}
    config = PatchConfig("trajectory", base="sinusoidal", strength=0.3, sinusoid_scale=2)
    assert dict(config.options) == {**{o.name: o.default for o in SOURCES["trajectory"].options}, "base": "sinusoidal",
                                    "strength": 0.3, "sinusoid_scale": 2.0}
    assert config.strength == 0.3 and PatchConfig("rope").strength == declared_options()["strength"].default
    with pytest.raises(AttributeError):
        config.no_such_option  # noqa: B018
    assert config.replace(strength=0.5).strength == 0.5 and config.strength == 0.3


def test_config_round_trip_drops_unknown_keys_with_a_warning(tmp_path):
    cfg = PatchConfig("trajectory", base="sinusoidal", strength=0.3, beta=1.5, interpolation="cubic")
    cfg.save(tmp_path)
    assert PatchConfig.load(tmp_path) == cfg
    data = json.loads((tmp_path / CONFIG_NAME).read_text())
    data["from_the_future"] = 1
    (tmp_path / CONFIG_NAME).write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="from_the_future"):
        assert PatchConfig.load(tmp_path) == cfg
    with pytest.raises(FileNotFoundError, match=CONFIG_NAME):
        PatchConfig.load(tmp_path / "nowhere")


def test_patch_errors_are_loud_and_leave_the_model_untouched():
    model = build("llama")
    ids = random_ids(6)
    stock = output(model, input_ids=ids)
    with pytest.raises(TypeError, match="supported options"):
        hf_trajpe.patch(model, "rope", strenght=0.2)
    with pytest.raises(ValueError, match="supported bases: sinusoidal, rope, alibi"):
        hf_trajpe.patch(model, "trajectory", base="learned")
    with pytest.raises(ValueError, match="supported encodings"):
        hf_trajpe.patch(model, "t5-bias")
    model.config._attn_implementation_internal = "flash_attention_2"
    with pytest.raises(NotImplementedError, match="eager"):
        hf_trajpe.patch(model, "alibi")
    model.config._attn_implementation_internal = "sdpa"
    assert get_handle(model) is None and "hf_trajpe" not in model._modules
    torch.testing.assert_close(output(model, input_ids=ids), stock, rtol=0, atol=0)
    hf_trajpe.patch(model, "alibi")
    with pytest.raises(RuntimeError, match="already patched"):
        hf_trajpe.patch(model, "rope")
    hf_trajpe.unpatch(model)
    with pytest.raises(ValueError, match="not patched"):
        hf_trajpe.unpatch(model)


@pytest.mark.parametrize("config_name,model_name,why", [
    ("T5Config", "T5ForConditionalGeneration", "encoder-decoder"),
    ("DebertaV2Config", "DebertaV2ForMaskedLM", "disentangled attention"),
])
def test_models_without_supported_positions_are_refused_with_the_reason(config_name, model_name, why):
    import transformers as T

    sizes = dict(vocab_size=64, hidden_size=32, d_model=32, num_layers=1, num_hidden_layers=1, num_heads=2,
                 num_attention_heads=2, d_ff=64, intermediate_size=64, d_kv=16, relative_attention=True,
                 position_biased_input=False)  # DeBERTa-v3's settings
    cfg = getattr(T, config_name)()
    for k, v in sizes.items():
        if hasattr(cfg, k):
            setattr(cfg, k, v)
    model = getattr(T, model_name)(cfg)
    with pytest.raises(NotImplementedError, match=why):
        hf_trajpe.patch(model, "rope")


def test_a_rope_type_hf_trajpe_does_not_reproduce_is_refused():
    """``dynamic`` and ``longrope`` are reproduced (tests/patching/test_rope_scaling.py); a type the patch does
    not know is refused with the list."""
    model = build("llama")
    model.model.rotary_emb.rope_type = "proportional"
    with pytest.raises(NotImplementedError, match="supported rope types: default, linear, llama3, yarn, dynamic"):
        hf_trajpe.patch(model, "native")


def test_print_shows_the_patch():
    model = build("gpt2")
    with hf_trajpe.patch(model, "trajectory", strength=0.3):
        text = repr(model)
        assert "PatchedPositionTable" in text and "trajectory on learned" in text
    assert "PatchedPositionTable" not in repr(model)


# -- save / reload --------------------------------------------------------------------------------
@pytest.mark.parametrize("family,encoding,opts", [
    ("gpt2", "trajectory", {"learnable_strength": True, "strength": 0.3}),
    ("llama", "alibi", {}),
    ("bert", "trajectory", {"base": "sinusoidal", "interpolation": "linear"}),
])
def test_save_then_reload_restores_patch_and_logits(tmp_path, family, encoding, opts):
    import transformers as T

    model = build(family)
    ids = random_ids(9, b=2)
    stock = output(model, input_ids=ids)
    handle = hf_trajpe.patch(model, encoding, **opts)
    if opts.get("learnable_strength"):
        with torch.no_grad():
            handle.state.strength.raw.fill_(0.7)  # as if trained: must survive the round trip
    want = output(model, input_ids=ids)
    model.save_pretrained(tmp_path)
    assert (tmp_path / CONFIG_NAME).exists()
    saved_cfg = json.loads((tmp_path / "config.json").read_text())
    assert saved_cfg.pop(SAVE_ID_KEY) == json.loads((tmp_path / CONFIG_NAME).read_text())["save_id"]
    assert "hf_trajpe" not in json.dumps(saved_cfg), "config.json must stay loadable without hf_trajpe"

    reloaded = hf_trajpe.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert get_handle(reloaded).config == resolved_config(handle)  # trajectory names the base it ran on
    torch.testing.assert_close(output(reloaded, input_ids=ids), want, rtol=0, atol=0)

    # the Auto class plus one call
    auto = T.AutoModelForCausalLM if family != "bert" else T.AutoModelForMaskedLM
    plain = auto.from_pretrained(tmp_path, dtype=torch.float32).eval()
    torch.testing.assert_close(output(plain, input_ids=ids), stock, rtol=0, atol=0)
    hf_trajpe.load_patch(plain, tmp_path)
    torch.testing.assert_close(output(plain, input_ids=ids), want, rtol=0, atol=0)


# -- training -------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,targets", [("gpt2", ["c_attn"]), ("llama", ["q_proj", "v_proj"])])
def test_lora_trains_on_a_patched_model(family, targets):
    peft = pytest.importorskip("peft")
    model = build(family)
    hf_trajpe.patch(model, "trajectory", base="alibi", strength=0.3)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))
    lora.train()
    params = [p for p in lora.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=1e-2)
    ids = random_ids(16, b=4)
    losses = []
    for _ in range(5):
        loss = lora(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    assert any(not torch.equal(a, b) for a, b in zip(before, params, strict=True))
    assert get_handle(lora) is not None  # the patch is still in force inside the PEFT wrapper


def test_trainer_runs_a_few_steps_on_a_patched_model(tmp_path):
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    model = build("llama").train()
    handle = hf_trajpe.patch(model, "trajectory", strength=0.3, learnable_strength=True)
    start = handle.state.strength.value.item()
    ids = random_ids(16, b=8)
    ds = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4,
                             learning_rate=5e-2, report_to=[], save_strategy="no", logging_steps=1,
                             use_cpu=True, disable_tqdm=True)
    result = Trainer(model=model, args=args, train_dataset=ds).train()
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    assert handle.state.strength.value.item() != start, "Trainer did not train the learnable strength"


# -- strength and cache options ---------------------------------------------------------------------
AUTO_CODE = "def f(x):\n    if x > 0:\n        return [x, {'a': (1, 2)}]\n    return None\n"  # code_hierarchy: 0.25
AUTO_RANDOM = "qz8#Lw!0xP@v^3m&Kd7*Rt%Y2nB(9fJ)cH~5gU=1sE+4aT<6yO>8iQ?7rW|0eZ"  # random_content: 0.0


def test_auto_strength_uses_texts_and_defaults_without_them():
    """``strength="auto"`` picks one strength per sequence from its text's content type; without texts it
    is the default 0.2. ``set_texts`` applies to the next forward only; ``with handle.texts(...)`` to the
    forwards inside the block."""
    model = build("gpt2")
    ids = random_ids(10, b=2)
    with hf_trajpe.patch(model, "trajectory", strength=0.2) as fixed:
        assert fixed.config.strength == 0.2
        want = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "trajectory", strength="auto") as auto:
        torch.testing.assert_close(output(model, input_ids=ids), want, rtol=0, atol=0)  # default 0.2
        assert float(auto.state._auto_alpha) == pytest.approx(0.2)
        auto.set_texts([AUTO_CODE, AUTO_RANDOM])
        by_type = output(model, input_ids=ids)
        assert auto.state.strength.last_types == ["code_hierarchy", "random_content"]
        assert auto.state._auto_alpha.tolist() == pytest.approx([0.25, 0.0]), "the strength follows the texts"
        assert not torch.allclose(by_type, want), "another strength must change the output"
        torch.testing.assert_close(output(model, input_ids=ids), want, rtol=0, atol=0)  # next forward: default
        assert float(auto.state._auto_alpha) == pytest.approx(0.2), "set_texts applies to one forward only"
        with auto.texts([AUTO_CODE, AUTO_RANDOM]):
            torch.testing.assert_close(output(model, input_ids=ids), by_type, rtol=0, atol=0)
            torch.testing.assert_close(output(model, input_ids=ids), by_type, rtol=0, atol=0)  # the whole block
        torch.testing.assert_close(output(model, input_ids=ids), want, rtol=0, atol=0)
    with hf_trajpe.patch(model, "trajectory", strength=0.0):  # the random text's row has strength 0
        torch.testing.assert_close(output(model, input_ids=ids)[1], by_type[1], rtol=0, atol=0)


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_displacement_cache_never_changes_results(family):
    model = build(family)
    ids = random_ids(10, b=3)
    kw = {"use_cache": False} if family == "llama" else {}  # BERT: the cache is used as is
    with hf_trajpe.patch(model, "trajectory", strength=0.4):
        want = output(model, input_ids=ids, **kw)
    with hf_trajpe.patch(model, "trajectory", strength=0.4, cache=True) as h:
        first = output(model, input_ids=ids, **kw)
        second = output(model, input_ids=ids, **kw)
        assert h.state.displacement_cache.hits == 3 and h.state.displacement_cache.lookups == 6
    torch.testing.assert_close(first, want, rtol=0, atol=0)
    torch.testing.assert_close(second, want, rtol=0, atol=0)


def test_fractional_positions_never_reach_the_model_forward():
    """Fractional positions never go into the model's own position_ids (transformers reads non-unit steps
    there as packed sequences: docs/notes.md). position_ids from the caller are accepted when they are the
    ranks the mask implies, and refused otherwise (they used to be ignored silently)."""
    model = build("llama")
    ids = random_ids(10, b=1)
    with hf_trajpe.patch(model, "trajectory", strength=0.5):
        plain = output(model, input_ids=ids)
        ranks = output(model, input_ids=ids, position_ids=torch.arange(10)[None])
        with pytest.raises(ValueError, match="position_ids=None"):
            output(model, input_ids=ids, position_ids=torch.arange(10)[None] * 3)
    torch.testing.assert_close(ranks, plain, rtol=0, atol=0)


@pytest.mark.slow
def test_flex_attention_forward_matches_sdpa():
    """flex_attention against sdpa on a tiny Llama, batch 2 with left padding: first unpatched (transformers'
    compiled flex: is flex itself right here?), then patched with ALiBi and trajectory/ALiBi, whose positions
    reach flex through hf_trajpe's ``score_mod`` (compiled static, per shape bucket: patching/flex.py).
    Forward only: CPU has no flex backward. Errors fail the test (no skip). About 20-60 s on 2 CPU cores
    (flex compiles). More in tests/patching/test_flex.py; docs/patching.md, FlexAttention."""
    import torch._dynamo

    torch._dynamo.reset()  # fresh compiles, so that the timing above holds whatever ran before
    ids = random_ids(8, b=2)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0
    real = mask.bool()  # padding queries are left out: their rows are arbitrary in both
    flex, sdpa = build("llama", "flex_attention"), build("llama", "sdpa")

    def logits(model, enc=None, **opts):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if enc is None:
                return output(model, input_ids=ids, attention_mask=mask)
            with hf_trajpe.patch(model, enc, **opts):
                return output(model, input_ids=ids, attention_mask=mask)

    torch.testing.assert_close(logits(flex)[real], logits(sdpa)[real], rtol=1e-5, atol=1e-5,
                               msg=lambda m: f"unpatched flex differs from sdpa (flex itself, not the patch): {m}")
    for enc, opts in (("alibi", {}), ("trajectory", {"base": "alibi"})):
        got = logits(flex, enc, **opts)
        assert torch.isfinite(got).all(), f"patched flex ({enc}) gave non-finite logits"
        torch.testing.assert_close(got[real], logits(sdpa, enc, **opts)[real], rtol=1e-5, atol=1e-5,
                                   msg=lambda m, e=enc: f"patched flex ({e}) differs from patched sdpa: {m}")


def test_import_hf_trajpe_stays_light():
    import subprocess
    import sys

    code = "import sys, hf_trajpe; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ})
    assert out.stdout.strip() == "False"
