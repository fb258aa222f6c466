"""``sinusoid_scale`` (a fair amplitude for the added sinusoid) and auto strength from a tokenizer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from patch_models import build, output, random_ids

import hf_trajpe
from hf_trajpe.patching import PatchConfig
from hf_trajpe.strength import AUTO_STRENGTHS
from tests.reference import sinusoidal as ref_sinusoidal
from tests.reference import trajectory as ref_trajectory


def _embedding_output(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, output_hidden_states=True).hidden_states[0]


@pytest.mark.parametrize("scale", [0.5, 0.03])
def test_scaled_sinusoid_matches_the_reference(scale):
    model = build("gpt2").eval()
    ids = random_ids(12, b=2)
    wte = model.get_input_embeddings().weight.detach().double().numpy()[ids.numpy()]
    with hf_trajpe.patch(model, "sinusoidal", sinusoid_scale=scale):
        got = _embedding_output(model, ids).double().numpy()
    want = wte + scale * ref_sinusoidal(np.arange(12)[None].repeat(2, 0), wte.shape[-1])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_scaled_sinusoid_under_trajectory_matches_the_reference():
    model = build("gpt2").eval()
    ids = random_ids(12, b=2)
    wte = model.get_input_embeddings().weight.detach().double().numpy()[ids.numpy()]
    with hf_trajpe.patch(model, "trajectory", base="sinusoidal", strength=0.3, sinusoid_scale=0.1):
        got = _embedding_output(model, ids).double().numpy()
    positions = ref_trajectory(wte, strength=0.3, max_positions=model.config.n_positions)
    want = wte + 0.1 * ref_sinusoidal(positions, wte.shape[-1])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_embedding_scale_is_resolved_to_a_number_and_reloads(tmp_path):
    model = build("gpt2").eval()
    rms = model.get_input_embeddings().weight.detach().pow(2).mean().sqrt().item()
    handle = hf_trajpe.patch(model, "sinusoidal", sinusoid_scale="embeddings")
    assert handle.config.sinusoid_scale == pytest.approx(math.sqrt(2) * rms, rel=1e-6)
    # the added sinusoid has the token embeddings' RMS
    ids = random_ids(64, b=1)
    added = _embedding_output(model, ids) - model.get_input_embeddings()(ids)
    assert added.pow(2).mean().sqrt().item() == pytest.approx(rms, rel=0.05)
    want = output(model, input_ids=ids)
    model.save_pretrained(tmp_path)
    saved = PatchConfig.load(tmp_path)
    assert isinstance(saved.sinusoid_scale, float) and saved.sinusoid_scale == handle.config.sinusoid_scale
    reloaded = hf_trajpe.from_pretrained(str(tmp_path))
    torch.testing.assert_close(output(reloaded, input_ids=ids), want, rtol=0, atol=0)


def test_sinusoid_scale_errors_say_what_to_do():
    with pytest.raises(ValueError, match="'embeddings'"):
        PatchConfig("sinusoidal", sinusoid_scale="rms")
    with pytest.raises(ValueError, match="number > 0"):
        PatchConfig("sinusoidal", sinusoid_scale=0.0)
    with pytest.raises(ValueError, match="applies only to"):
        PatchConfig("rope", sinusoid_scale=0.5)
    with pytest.raises(ValueError, match="applies only to"):
        PatchConfig("trajectory", base="rope", sinusoid_scale=0.5)
    assert PatchConfig("sinusoidal").sinusoid_scale == 1.0


# -- auto strength from a tokenizer ------------------------------------------------------------------
CODE = "def f(x):\n    if x:\n        return [1, {'a': (2, 3)}]\n    return None\n" * 3
RANDOM = "qZ7#kP2@xW9!mL4$vB8%nR3^tY6&cJ1*" * 4


def _byte_model_and_tokenizer():
    from hf_trajpe.data import byte_tokenizer

    tok = byte_tokenizer()
    model = build("gpt2", vocab_size=len(tok), n_positions=512).eval()
    return model, tok


def test_auto_strength_from_a_tokenizer_equals_auto_strength_from_texts():
    from hf_trajpe.content import detect_content_type

    model, tok = _byte_model_and_tokenizer()
    texts = [CODE[:120], RANDOM[:120]]
    ids = torch.tensor([tok(t)["input_ids"][:100] for t in texts])
    handle = hf_trajpe.patch(model, "trajectory", strength="auto")
    handle.set_texts(tok.batch_decode(ids, skip_special_tokens=True))
    want = output(model, input_ids=ids)
    handle.set_texts(None)
    handle.set_tokenizer(tok)
    got = output(model, input_ids=ids)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    types = handle.state.strength.last_types
    assert types == [detect_content_type(t) for t in tok.batch_decode(ids, skip_special_tokens=True)]
    assert handle.state._auto_alpha.tolist() == pytest.approx([AUTO_STRENGTHS.get(t, AUTO_STRENGTHS["default"])
                                                               for t in types])
    with pytest.raises(TypeError, match="batch_decode"):
        handle.set_tokenizer("byte")


def test_auto_strength_decoding_keeps_the_prompt_strength():
    model, tok = _byte_model_and_tokenizer()
    ids = torch.tensor([tok(CODE)["input_ids"][:80]])
    handle = hf_trajpe.patch(model, "trajectory", strength="auto")
    handle.set_tokenizer(tok)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    prompt_alpha = handle.state._auto_alpha.clone()
    assert handle.state.strength.last_types != ["unknown"]
    # the cached generation equals recomputing the whole sequence at the prompt's strength
    handle.set_tokenizer(None)
    handle.set_texts([tok.decode(ids[0], skip_special_tokens=True)])
    full = output(model, input_ids=out)
    torch.testing.assert_close(handle.state._auto_alpha, prompt_alpha)
    with torch.no_grad():
        greedy = full[0, ids.shape[1] - 1:-1].argmax(-1)
    assert greedy.tolist() == out[0, ids.shape[1]:].tolist()
