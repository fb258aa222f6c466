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

from ....evaluation.seed_inference import benjamini_hochberg, holm, seed_interval, t_sf
from ....evaluation.verdicts import BETTER, CORRECTIONS, NO_DIFFERENCE, WORSE, ZERO_TOLERANCE, verdict_text

__all__ = ["CORRECTIONS", "SCORES", "read_losses", "test_blocks", "perplexity", "compare", "adjust", "percent"]

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
            "p_equivalence": 1.0 if iv["zero_spread"] else tost_nats(value, iv["se"], iv["df"], margin),
            "per_seed": [percent(d) for d in per_seed], "method": iv["method"], "margin": margin,
            "se_nats": iv["se"], "df": iv["df"], "zero_spread": iv["zero_spread"]}


def tost_nats(d: float, se: float, df: float, margin: float) -> float:
    """Two one-sided tests that the perplexity change lies within ``±margin`` percent, on the loss
    difference ``d`` (nats): ``percent(d)`` in ``(-margin, +margin)`` is ``d`` in
    ``(-log(1 + margin/100), -log(1 - margin/100))``. Below ``alpha`` exactly when the ``1 - 2 alpha``
    interval lies inside the margin (the interval the verdicts showed before the correction)."""
    if se == 0.0:
        return 1.0
    low, high = -math.log1p(margin / 100.0), -math.log1p(-margin / 100.0)
    return float(max(t_sf((d - low) / se, df), t_sf((high - d) / se, df)))


def adjust(comparisons: list[dict], level: float = 0.95, correction: str = "holm") -> None:
    """Adjust the p-values of ``comparisons`` (the ones one table shows) together, the differences and the
    equivalence tests alike, by Holm's and by Benjamini-Hochberg's method; ``correction`` (a key of
    :data:`~hf_trajpe.evaluation.verdicts.CORRECTIONS`, the one the config declares) decides ``verdict``, the
    other's is kept beside it (``verdict_holm``, ``verdict_bh``). A difference counts only when its adjusted
    p-value is below ``1 - level``, an equivalence only when its adjusted TOST p-value is (the interval shown is
    the unadjusted one)."""
    alpha = 1.0 - level
    raw = [c["p_value"] for c in comparisons]
    tost = [c["p_equivalence"] for c in comparisons]
    adjusted = {"holm": (holm(raw), holm(tost)), "bh": (benjamini_hochberg(raw), benjamini_hochberg(tost))}
    if not comparisons:
        return
    for i, c in enumerate(comparisons):
        for key, (p_sig, p_eq) in adjusted.items():
            p, pe = p_sig[i], p_eq[i]
            sig = NO_DIFFERENCE
            if p < alpha and abs(c["value"]) > ZERO_TOLERANCE:
                sig = BETTER if c["value"] > 0 else WORSE
            c[f"p_{key}"], c[f"p_equivalence_{key}"] = p, pe
            c[f"verdict_{key}"] = verdict_text(sig, pe < alpha, c["margin"])
        c["p_adjusted"], c["correction"] = c[f"p_{correction}"], CORRECTIONS[correction][1]
        c["verdict"] = c[f"verdict_{correction}"]
