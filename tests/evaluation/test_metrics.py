"""The local evaluate metrics and the scoring of a model, against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from hf_trajpe.evaluation import detect_mode, load_metric, mask_blocks, score_blocks


class FixedLogits(nn.Module):
    """A 'model' whose logits are the same vector at every position: its nll is easy by hand."""

    def __init__(self, logits):
        super().__init__()
        self.logits = nn.Parameter(torch.tensor(logits, dtype=torch.float32))

    def forward(self, input_ids, attention_mask=None):
        b, n = input_ids.shape
        return type("Out", (), {"logits": self.logits.expand(b, n, -1)})()


def test_cross_entropy_metric_matches_hand_computation():
    metric = load_metric("token_cross_entropy")
    out = metric.compute(nll=[0.1, 0.7, 2.2])
    assert out["cross_entropy"] == pytest.approx(1.0)
    assert out["perplexity"] == pytest.approx(math.e)
    assert out["n_tokens"] == 3


def test_accuracy_metric_skips_ignored_positions():
    metric = load_metric("token_accuracy")
    out = metric.compute(predictions=[5, 6, 7, 8], references=[5, 0, -100, 8])
    assert out == {"accuracy": pytest.approx(2 / 3), "n_tokens": 3}


def test_metrics_load_from_the_package_folder_not_the_hub():
    from hf_trajpe.evaluation import metric_path

    for name in ("token_cross_entropy", "token_accuracy"):
        path = metric_path(name)
        assert (path / f"{name}.py").exists()
        imports = [line for line in (path / f"{name}.py").read_text().splitlines() if line.startswith("import ")]
        assert all("," not in line for line in imports)  # one import per line: docs/notes.md, section 7


def test_causal_scoring_matches_hand_computation():
    logits = [2.0, 0.0, -1.0, 0.5]
    logp = [v - math.log(sum(math.exp(x) for x in logits)) for v in logits]
    blocks = torch.tensor([[3, 0, 1, 0], [1, 2, 2, 3]])
    scores = score_blocks(FixedLogits(logits), blocks, mode="clm", batch_size=1)
    # the first token of a block is never a target
    expected = [-(logp[0] + logp[1] + logp[0]), -(logp[2] + logp[2] + logp[3])]
    np.testing.assert_allclose(scores.nll, expected, rtol=1e-6)
    assert scores.count.tolist() == [3, 3]
    assert scores.correct.tolist() == [2, 0]  # argmax is token 0
    ce = sum(expected) / 6
    assert scores.metrics["cross_entropy"] == pytest.approx(ce, rel=1e-6)
    assert scores.metrics["perplexity"] == pytest.approx(math.exp(ce), rel=1e-6)
    assert scores.metrics["accuracy"] == pytest.approx(2 / 6)


def test_masking_is_deterministic_and_spares_special_tokens():
    ids = torch.randint(5, 100, (3, 40))
    ids[:, 0], ids[:, -1] = 1, 2
    a, la = mask_blocks(ids, mask_token_id=4, special_ids=[1, 2, 4], seed=7)
    b, lb = mask_blocks(ids, mask_token_id=4, special_ids=[1, 2, 4], seed=7)
    c, _ = mask_blocks(ids, mask_token_id=4, special_ids=[1, 2, 4], seed=8)
    assert torch.equal(a, b) and torch.equal(la, lb) and not torch.equal(a, c)
    masked = la != -100
    assert masked.sum(1).tolist() == [round(0.15 * 38)] * 3
    assert not masked[:, 0].any() and not masked[:, -1].any()
    assert torch.equal(la[masked], ids[masked]) and (a[masked] == 4).all()
    assert torch.equal(a[~masked], ids[~masked])


def test_masked_scoring_scores_only_masked_positions():
    tok = type("Tok", (), {"mask_token_id": 3, "all_special_ids": [0, 1, 3]})()
    blocks = torch.tensor([[0] + [2] * 20 + [1]])
    logits = [0.0, 0.0, 1.0, 0.0]
    scores = score_blocks(FixedLogits(logits), blocks, mode="mlm", tokenizer=tok)
    logp2 = 1.0 - math.log(3 + math.e)
    assert scores.count.tolist() == [3]  # 15% of 20 positions
    assert scores.nll[0] == pytest.approx(-3 * logp2, rel=1e-6)
    assert scores.metrics["accuracy"] == 1.0


def test_mode_detection():
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    tiny = dict(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    assert detect_mode(BertForMaskedLM(BertConfig(**tiny))) == "mlm"
    assert detect_mode(GPT2LMHeadModel(GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2))) == "clm"
