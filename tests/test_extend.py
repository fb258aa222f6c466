"""Content-aware context extension (``extend``): trajectory positions whose mean step is ``1/extend``, against a
NumPy reference of the formula; position interpolation at strength 0; the KV cache; the patch option."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T

import hf_trajpe
from hf_trajpe.encodings.trajectory import extend_positions, trajectory_positions


def reference(emb: np.ndarray, real: np.ndarray, alpha: float, beta: float, extend: float) -> np.ndarray:
    """Straight from the definition: step_i = (1 + alpha (t_i - mean(t_1..t_i))) / extend over real tokens."""
    out = np.zeros(real.shape)
    for r in range(emb.shape[0]):
        idx = np.flatnonzero(real[r])
        q, ts = 0.0, []
        for k, i in enumerate(idx):
            if k == 0:
                out[r, i] = 0.0
                continue
            t = np.tanh(beta * np.linalg.norm(emb[r, i].astype(np.float64) - emb[r, idx[k - 1]]))
            ts.append(t)
            q += (1 + alpha * (t - np.mean(ts))) / extend
            out[r, i] = q
    return out


@pytest.mark.parametrize("alpha,extend", [(0.3, 2.0), (0.8, 4.0), (1.0, 1.0)])
def test_extended_positions_match_the_formula_with_padding(alpha, extend):
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(3, 40, 8, generator=g)
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[1, :7] = 0  # left padding
    mask[2, 30:] = 0  # right padding
    p = trajectory_positions(emb, mask, alpha, beta=2.0)
    q, _ = extend_positions(p, mask, extend)
    want = reference(emb.numpy(), mask.numpy().astype(bool), alpha, 2.0, extend)
    np.testing.assert_allclose(q.numpy(), want, rtol=1e-5, atol=1e-4)


def test_mean_step_is_one_over_extend_and_strength_0_is_position_interpolation():
    emb = torch.randn(2, 2000, 16, generator=torch.Generator().manual_seed(1))
    p = trajectory_positions(emb, None, 0.5, beta=2.0)
    q, _ = extend_positions(p, None, 4.0)
    steps = q[:, 1:] - q[:, :-1]
    assert abs(steps.mean().item() - 0.25) < 0.01 and bool((steps > 0).all())
    p0 = trajectory_positions(emb, None, 0.0, beta=2.0)
    q0, _ = extend_positions(p0, None, 4.0)
    assert torch.equal(q0, torch.arange(2000, dtype=torch.float32).expand(2, -1) / 4.0)


def test_decoding_in_pieces_continues_the_running_sum():
    emb = torch.randn(2, 30, 8, generator=torch.Generator().manual_seed(2))
    full, _ = extend_positions(trajectory_positions(emb, None, 0.4), None, 2.0)
    p1, past = trajectory_positions(emb[:, :12], None, 0.4, return_past=True)
    q1, s1 = extend_positions(p1, None, 2.0)
    pieces = [q1]
    for t in range(12, 30):
        pt, new_past = trajectory_positions(emb[:, t:t + 1], None, 0.4, past=past, return_past=True)
        qt, s1 = extend_positions(pt, None, 2.0, past.num_real, s1)
        past = new_past
        pieces.append(qt)
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-6, atol=1e-5)


def _llama(max_positions: int = 32):
    cfg = T.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


def test_strength_0_with_extend_is_linear_rope_scaling_on_a_model():
    model = _llama()
    ids = torch.randint(3, 128, (1, 64))
    with torch.no_grad():
        with hf_trajpe.patch(model, "trajectory", base="rope", strength=0.0, extend=2.0):
            ours = model(input_ids=ids).logits
        with hf_trajpe.patch(model, "rope", rope_parameters={"rope_type": "linear", "factor": 2.0}):
            pi = model(input_ids=ids).logits
    torch.testing.assert_close(ours, pi, rtol=1e-4, atol=1e-5)  # p/2 * theta against p * theta/2: rounding only


def test_an_extended_trajectory_generates_the_same_with_and_without_the_cache(tmp_path):
    model = _llama()
    prompt = torch.randint(3, 128, (2, 40))
    mask = torch.ones_like(prompt)
    mask[1, :6] = 0
    with hf_trajpe.patch(model, "trajectory", base="rope", strength=0.5, extend=2.0) as handle:
        assert "extend=2" in handle.state.describe()
        gen = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, attention_mask=mask)
        cached, fresh = model.generate(prompt, use_cache=True, **gen), model.generate(prompt, use_cache=False, **gen)
        assert torch.equal(cached, fresh)
        beams = dict(gen, num_beams=2)
        assert torch.equal(model.generate(prompt, use_cache=True, **beams),
                           model.generate(prompt, use_cache=False, **beams))
        with torch.no_grad():
            want = model(input_ids=prompt, attention_mask=mask).logits
        model.save_pretrained(tmp_path)
    back = hf_trajpe.from_pretrained(tmp_path).eval()
    assert hf_trajpe.get_handle(back).config.extend == 2.0
    with torch.no_grad():
        assert torch.equal(back(input_ids=prompt, attention_mask=mask).logits, want)


@pytest.mark.parametrize("value", [0.5, True, float("inf"), "2"])
def test_extend_must_be_a_number_of_at_least_1(value):
    with pytest.raises(ValueError, match="extend must be a number >= 1"):
        hf_trajpe.PatchConfig("trajectory", extend=value)
    with pytest.raises(ValueError, match="apply only to encoding='trajectory'"):
        hf_trajpe.PatchConfig("rope", extend=2.0)
