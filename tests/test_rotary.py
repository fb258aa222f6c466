import numpy as np
import pytest
import torch

from hf_trajpe import apply_rotary, rotary_cos_sin, rotary_inv_freq

from . import reference


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_matches_numpy_reference(layout):
    x = torch.randn(1, 1, 7, 16, dtype=torch.float64)
    pos = torch.tensor([[0.0, 1.0, 2.5, 3.0, 10.75, 100.0, 511.5]])
    cos, sin = rotary_cos_sin(pos, 16, layout=layout)
    q, _ = apply_rotary(x, x, cos.double(), sin.double(), layout=layout)
    ref = reference.rope_rotate(x[0, 0].numpy(), pos[0].numpy(), layout=layout)
    np.testing.assert_allclose(q[0, 0].numpy(), ref, atol=2e-5)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_relative_fractional_offset(layout):
    q = torch.randn(1, 1, 1, 32)
    k = torch.randn(1, 1, 1, 32)

    def score(pq: float, pk: float) -> torch.Tensor:
        cq, sq = rotary_cos_sin(torch.tensor([[pq]], dtype=torch.float64), 32, layout=layout)
        ck, sk = rotary_cos_sin(torch.tensor([[pk]], dtype=torch.float64), 32, layout=layout)
        rq, _ = apply_rotary(q.double(), q.double(), cq.double(), sq.double(), layout=layout)
        _, rk = apply_rotary(k.double(), k.double(), ck.double(), sk.double(), layout=layout)
        return (rq * rk).sum()

    base = score(7.25, 3.0)
    for shift in (1.0, 13.5, 250.125):
        torch.testing.assert_close(score(7.25 + shift, 3.0 + shift), base, rtol=0, atol=2e-4)
    assert not torch.allclose(score(7.25, 2.0), base, atol=1e-3)


def test_matches_transformers_llama_rotary_bit_for_bit():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_apply

    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=10000.0)
    hf = LlamaRotaryEmbedding(cfg)
    pos = torch.arange(50)[None]
    x = torch.randn(1, 4, 50, 16)
    hf_cos, hf_sin = hf(x, pos)
    cos, sin = rotary_cos_sin(pos, 16, base=10000.0, dtype=x.dtype)
    assert torch.equal(cos, hf_cos) and torch.equal(sin, hf_sin)
    assert torch.equal(rotary_inv_freq(16), hf.inv_freq)
    ours = apply_rotary(x, x, cos, sin)
    theirs = hf_apply(x, x, hf_cos, hf_sin)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_partial_rotary_leaves_the_tail_untouched():
    x = torch.randn(1, 2, 5, 16)
    cos, sin = rotary_cos_sin(torch.arange(5.0)[None], 4)
    q, _ = apply_rotary(x, x, cos, sin)
    assert torch.equal(q[..., 4:], x[..., 4:])
    assert not torch.equal(q[..., :4], x[..., :4])


def test_bad_arguments():
    with pytest.raises(ValueError, match="layout"):
        rotary_cos_sin(torch.arange(3), 8, layout="diagonal")
    with pytest.raises(ValueError, match="even"):
        rotary_inv_freq(7)
    with pytest.raises(ValueError, match="dim or inv_freq"):
        rotary_cos_sin(torch.arange(3))
