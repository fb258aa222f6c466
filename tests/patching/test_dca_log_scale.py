"""DCA's ``log_scale``: the reference code (HKUNLP/ChunkLlama, ``get_mscale``) multiplies cos and sin by
``1 + 0.05 ln(n / P)`` past the trained length ``P``, so every score by its square. Checked against that formula
through the model's own score scale, per row, in cached decoding, and saved only when set."""

from __future__ import annotations

import json
import math

import torch
from patch_models import build, cached_logits, output, random_ids
from test_remap import left_padded

import hf_trajpe

OPTIONS = {"chunk_size": 40, "local_window": 8}
TOL = dict(rtol=1e-5, atol=1e-5)


def factor(n: int, trained: int, c: float = 0.05) -> float:
    return (1 + c * math.log(n / trained)) ** 2 if n > trained else 1.0


def test_scores_are_scaled_by_the_square_of_the_reference_factor():
    """Past the trained length (128 here) every score of a 200-token read is multiplied by (1 + 0.05 ln(200/128))^2:
    the plain DCA read with each attention module's own score scale multiplied by it."""
    model = build("llama")
    trained = model.config.max_position_embeddings
    ids = random_ids(200, seed=2)
    with hf_trajpe.patch(model, "dca", log_scale=0.05, **OPTIONS):
        got = output(model, input_ids=ids)
    modules = [layer.self_attn for layer in model.model.layers]
    for m in modules:
        m.scaling *= factor(200, trained)
    with hf_trajpe.patch(model, "dca", **OPTIONS):
        want = output(model, input_ids=ids)
    for m in modules:
        m.scaling /= factor(200, trained)
    torch.testing.assert_close(got, want, **TOL)
    with hf_trajpe.patch(model, "dca", **OPTIONS):
        assert not torch.allclose(output(model, input_ids=ids), got, atol=1e-4)


def test_within_the_trained_length_it_changes_nothing():
    model = build("llama")
    ids = random_ids(120, seed=2)
    with hf_trajpe.patch(model, "dca", log_scale=0.05, **OPTIONS):
        got = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "dca", **OPTIONS):
        assert torch.equal(output(model, input_ids=ids), got)


def test_each_row_takes_its_own_length_left_or_right_padded():
    """A row's factor follows its own real tokens: a left- or right-padded row equals the sequence alone."""
    model = build("llama")
    ids, mask = left_padded((170, 131), seed=4)
    right_ids = torch.zeros_like(ids)
    right_ids[0], right_ids[1, :131] = ids[0], ids[1, 39:]
    right_mask = torch.zeros_like(mask)
    right_mask[0], right_mask[1, :131] = 1, 1
    with hf_trajpe.patch(model, "dca", log_scale=0.05, **OPTIONS):
        alone = output(model, input_ids=ids[1:, 39:])[0]
        left = output(model, input_ids=ids, attention_mask=mask)[1, 39:]
        right = output(model, input_ids=right_ids, attention_mask=right_mask)[1, :131]
    torch.testing.assert_close(left, alone, **TOL)
    torch.testing.assert_close(right, alone, **TOL)


def test_each_forward_scales_at_its_rows_lengths(monkeypatch):
    """The factor of every forward is each row's own real length so far: the prefill's rows at theirs, each decoding
    step one more (what the KV cache holds was computed at the lengths it was read at, as in the reference)."""
    from hf_trajpe.patching.schemes.remap.dca import DualChunk

    seen = []
    real = DualChunk.score_scale
    monkeypatch.setattr(DualChunk, "score_scale", lambda self, kp: seen.append(real(self, kp)) or seen[-1])
    model = build("llama")
    trained = model.config.max_position_embeddings
    ids, mask = left_padded((170, 131), seed=4)
    with hf_trajpe.patch(model, "dca", log_scale=0.05, **OPTIONS):
        cached_logits(model, ids, mask, prefix=160)
    lengths = [(160 + k, 121 + k) for k in range(11)]  # the prefill, then one token per step
    want = torch.tensor([[factor(a, trained), factor(b, trained)] for a, b in lengths])
    torch.testing.assert_close(torch.stack(seen), want, rtol=1e-6, atol=1e-6)


def test_saved_only_when_set(tmp_path):
    model = build("llama")
    with hf_trajpe.patch(model, "dca", **OPTIONS) as handle:
        assert "log_scale" not in handle.state.describe()
        assert "log_scale" not in json.dumps(handle.config.to_dict())
    hf_trajpe.patch(model, "dca", log_scale=0.05, **OPTIONS)
    ids = random_ids(200, seed=2)
    want = output(model, input_ids=ids)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "hf_trajpe_config.json").read_text())["scheme_options"]["log_scale"] == 0.05
    torch.testing.assert_close(output(hf_trajpe.from_pretrained(tmp_path).eval(), input_ids=ids), want, **TOL)
