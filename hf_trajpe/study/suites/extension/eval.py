"""What the extension study measures on its small models: the loss of reading ``factor`` x ``T`` tokens
with each method, per content type, and the paired comparisons of methods with intervals that stay honest
at three seeds (:mod:`hf_trajpe.evaluation.seed_inference`).

Every seed's model reads the same test sequences, so two methods are paired by seed and by sequence. A
comparison's value is the mean over seeds of the per-seed mean of ``loss(reference) - loss(model)`` (nats
per token, positive: the model reads better); its interval is Student's t over the per-seed values plus the
sequences' standard error, shown as the percent change of perplexity ``100 (1 - exp(-d))`` (monotone, so the
interval and the verdicts carry over). Two scores per sequence: ``whole`` (every token of the sequence, the
PI paper's measure at an evaluation window) and ``past`` (only the tokens past ``T``).

Shape legend: ``N`` sequences, ``L`` tokens each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ....evaluation.seed_inference import benjamini_hochberg, holm, seed_interval
from ....evaluation.verdicts import plain_verdict

__all__ = ["CORRECTIONS", "SCORES", "read_losses", "test_blocks", "perplexity", "compare", "adjust", "percent"]

#: corrections for many comparisons: Holm's (family-wise error) or Benjamini-Hochberg's (false discovery rate)
CORRECTIONS = {"holm": (holm, "Holm"), "bh": (benjamini_hochberg, "Benjamini-Hochberg")}
#: the two scores of a read (module docstring)
SCORES = ("whole", "past")


def test_blocks(streams: Mapping[str, list[int]], length: int, count: int) -> dict[str, torch.Tensor]:
    """``{type: [N, length]}``: up to ``count`` consecutive blocks of each type's test stream (a type whose
    stream holds fewer than 2 blocks is left out: no interval from one sequence)."""
    out = {}
    for kind, stream in streams.items():
        n = min(count, len(stream) // length)
        if n >= 2:
            out[kind] = torch.tensor(stream[: n * length], dtype=torch.long).view(n, length)
    return out


@torch.no_grad()
def read_losses(model, blocks: torch.Tensor, trained: int, batch_size: int = 8) -> dict[str, np.ndarray]:
    """Mean next-token loss of each sequence of ``blocks`` ``[N, L]``: ``{"whole": [N], "past": [N]}``
    (``past``: the tokens at positions ``>= trained``, i.e. predicted from position ``trained - 1`` on)."""
    model.eval()
    whole, past = [], []
    for start in range(0, blocks.shape[0], batch_size):
        ids = blocks[start:start + batch_size]
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        whole.append(nll.mean(1).double().numpy())
        past.append(nll[:, trained - 1:].mean(1).double().numpy())
    return {"whole": np.concatenate(whole), "past": np.concatenate(past)}


def percent(d: float) -> float:
    """A loss difference (nats per token, reference minus model) as the percent change of perplexity."""
    return 100.0 * (1.0 - math.exp(-d))


def perplexity(per_seed: Sequence[np.ndarray], level: float = 0.95) -> dict:
    """Perplexity of one method from each seed's per-sequence losses, with its interval (t over seeds plus
    sequences)."""
    means = [float(np.mean(a)) for a in per_seed]
    value = float(np.mean(means))
    by_sequence = np.mean(np.stack(per_seed), axis=0)
    example_sd = float(np.std(by_sequence, ddof=1) / math.sqrt(by_sequence.size)) if by_sequence.size > 1 else 0.0
    iv = seed_interval(value, means, example_sd, level)
    lo, hi = iv["ci"]
    return {"ppl": math.exp(value), "ci": (math.exp(lo), math.exp(hi)), "per_seed": [math.exp(m) for m in means]}


def compare(model: Sequence[np.ndarray], reference: Sequence[np.ndarray], margin: float, level: float = 0.95) -> dict:
    """``model`` against ``reference`` (each: per seed, the per-sequence losses of the same sequences): the
    percent change of perplexity (positive: ``model`` lower) with its interval, p-value and verdict."""
    diffs = [np.asarray(r, dtype=np.float64) - np.asarray(m, dtype=np.float64) for m, r in zip(model, reference,
                                                                                               strict=True)]
    per_seed = [float(d.mean()) for d in diffs]
    value = float(np.mean(per_seed))
    by_sequence = np.mean(np.stack(diffs), axis=0)
    example_sd = float(np.std(by_sequence, ddof=1) / math.sqrt(by_sequence.size)) if by_sequence.size > 1 else 0.0
    iv = seed_interval(value, per_seed, example_sd, level)
    return {"value": percent(value), "ci": tuple(map(percent, iv["ci"])),
            "ci_equivalence": tuple(map(percent, iv["ci_equivalence"])), "p_value": iv["p_value"],
            "per_seed": [percent(d) for d in per_seed], "method": iv["method"], "margin": margin}


def adjust(comparisons: list[dict], level: float = 0.95, correction: str = "holm") -> None:
    """Adjust the p-values of ``comparisons`` (the ones one table shows) together (``correction``: a key of
    :data:`CORRECTIONS`), then give each its verdict: a difference counts only when its adjusted p-value is
    below ``1 - level`` (the interval shown is the unadjusted one; a significant-looking interval whose
    adjusted p-value is not small says so)."""
    fn, name = CORRECTIONS[correction]
    adjusted = fn([c["p_value"] for c in comparisons]) if comparisons else []
    for c, p in zip(comparisons, adjusted, strict=True):
        c["p_adjusted"], c["correction"] = p, name
        verdict = plain_verdict(c["ci"], c["ci_equivalence"], c["margin"])
        if p >= 1.0 - level and verdict.startswith(("better", "worse")):
            eq = verdict.split("yet ", 1)[1] if "yet " in verdict else f"not shown equivalent within ±{c['margin']:g}%"
            verdict = f"no significant difference after {name} (p = {p:.2g}); {eq}"
        c["verdict"] = verdict
