import pytest
import torch

from hf_trajpe import alibi_bias, alibi_slopes

from . import reference


def test_eight_heads_are_one_half_to_one_256th():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)]))


def test_twelve_heads_follow_the_papers_rule():
    expected = [2.0**-i for i in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected), rtol=1e-6, atol=0)


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 12, 16, 20, 24, 32, 40])
def test_any_head_count_matches_reference(heads):
    torch.testing.assert_close(alibi_slopes(heads), torch.tensor(reference.alibi_slopes(heads)))


def test_causal_and_bidirectional_bias():
    slopes = alibi_slopes(4)
    pos = torch.tensor([0.0, 1.0, 2.5])
    causal = alibi_bias(slopes, pos)
    assert causal.shape == (1, 4, 3, 3)
    torch.testing.assert_close(causal[0, 1, 2, 0], -slopes[1] * 2.5)
    torch.testing.assert_close(causal[0, 0, 2, 1], -slopes[0] * 1.5)
    bidir = alibi_bias(slopes, pos, causal=False)
    torch.testing.assert_close(bidir[0, 2, 0, 2], -slopes[2] * 2.5)
    torch.testing.assert_close(bidir, bidir.transpose(-1, -2))


def test_batched_fractional_queries_against_cached_keys():
    slopes = alibi_slopes(2)
    keys = torch.tensor([[0.0, 1.2, 2.7], [0.0, 1.0, 2.0]])
    queries = torch.tensor([[3.9], [3.0]])
    bias = alibi_bias(slopes, queries, keys)
    assert bias.shape == (2, 2, 1, 3)
    torch.testing.assert_close(bias[0, 0, 0], -slopes[0] * (3.9 - keys[0]))
    torch.testing.assert_close(slopes, torch.tensor([2.0**-4, 2.0**-8]))


def test_bad_head_count():
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)
