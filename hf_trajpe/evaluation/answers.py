"""Exact-match scoring of tasks with known answers (docs/tasks.md), for causal language models.

A row has ``text`` and ``answer_spans`` (character spans, :mod:`hf_trajpe.data.tasks`); it is tokenized
with its answer-token mask (:func:`hf_trajpe.data.tasks.encode_rows`) and run once through the model
(teacher forcing: the gold text is the input). An answer token is right when the arg-max of the logits at
the position before it is that token; an example is an exact match when all its answer tokens are right.

- :func:`exact_match`: per-example exact match and answer-token accuracy of one model on one split, with
  95% percentile bootstrap intervals over examples (:func:`~hf_trajpe.evaluation.bootstrap.bootstrap_ci`).
- :func:`accuracy_intervals`: the mean over training seeds of a per-example score, with intervals over
  examples (the same resampled examples for every seed), over seeds, and over both (seeds, then examples).
- :func:`paired_difference`: the same for the difference between two models on the same examples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .bootstrap import bootstrap_ci, percentile_interval
from .metrics import get_metric
from .scoring import _texts_for, detect_mode
from .seed_inference import seed_interval

__all__ = ["AnswerScores", "accuracy_intervals", "exact_match", "paired_difference"]


@dataclass
class AnswerScores:
    """Per example: ``exact`` (all answer tokens right), ``correct`` and ``count`` (answer tokens);
    ``metrics``: ``exact_match`` and ``token_accuracy`` (fractions) with their intervals."""

    exact: np.ndarray
    correct: np.ndarray
    count: np.ndarray
    metrics: dict

    def summary(self) -> dict:
        return {**self.metrics, "n_examples": int(len(self.exact)), "n_answer_tokens": int(self.count.sum())}


def _encode(split, tokenizer):
    from ..data.tasks import encode_rows

    if hasattr(split, "column_names"):
        texts, spans = list(split["text"]), list(split["answer_spans"])
    else:
        texts, spans = [r["text"] for r in split], [r["answer_spans"] for r in split]
    return encode_rows(texts, spans, tokenizer)


@torch.no_grad()
def exact_match(model, dataset_split, tokenizer, batch_size: int = 16, n_resamples: int = 2000,
                level: float = 0.95, seed: int = 0, progress=None) -> AnswerScores:
    """Score ``model`` on the rows of ``dataset_split`` (a ``datasets.Dataset`` or a list of rows with
    ``text`` and ``answer_spans``). Rows are right-padded into batches of ``batch_size`` with an attention
    mask. Causal language models only: a masked-LM head raises ``ValueError``."""
    if detect_mode(model) != "clm":
        raise ValueError("exact-match scoring of answers needs a causal language model (next-token logits)")
    encoded = _encode(dataset_split, tokenizer)
    if not encoded:
        raise ValueError("no examples to score")
    if any(not any(mask) for _, mask in encoded):
        raise ValueError("every example needs at least one answer token")
    if any(mask[0] for _, mask in encoded):
        raise ValueError("an answer cannot start at the first token (nothing precedes it to predict it)")
    model.eval()
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    exact, correct, count = [], [], []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        attention = torch.zeros((len(chunk), width), dtype=torch.long)
        answer = torch.zeros((len(chunk), width), dtype=torch.bool)
        for row, (row_ids, mask) in enumerate(chunk):
            ids[row, :len(row_ids)] = torch.tensor(row_ids)
            attention[row, :len(row_ids)] = 1
            answer[row, :len(mask)] = torch.tensor(mask)
        with _texts_for(model, tokenizer, ids):
            logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
        predicted = logits[:, :-1].argmax(-1).cpu()  # the prediction of token t sits at t - 1
        target, scored = ids[:, 1:], answer[:, 1:]
        hits = (predicted == target) & scored
        n = scored.sum(1)
        correct.append(hits.sum(1).numpy())
        count.append(n.numpy())
        exact.append((hits.sum(1) == n).numpy())
        if progress is not None:
            progress(len(chunk))
    exact_a, correct_a, count_a = np.concatenate(exact), np.concatenate(correct), np.concatenate(count)
    em, tokens = get_metric("exact_match"), get_metric("answer_token_accuracy")
    ratio = lambda v: tokens(v[:, 0], v[:, 1])  # noqa: E731  (token accuracy of resampled examples)
    metrics = {"exact_match": em(correct_a, count_a),
               "exact_match_ci": bootstrap_ci(em.per_example(correct_a, count_a)[0], n_resamples=n_resamples,
                                              level=level, seed=seed),
               "token_accuracy": float(tokens(correct_a, count_a)),
               "token_accuracy_ci": bootstrap_ci(np.stack([correct_a, count_a], 1), ratio, n_resamples, level, seed),
               "level": level, "n_resamples": n_resamples}
    return AnswerScores(exact_a.astype(bool), correct_a.astype(np.int64), count_a.astype(np.int64), metrics)


def _rates(values: np.ndarray, weights: np.ndarray, seed_idx: np.ndarray | None) -> np.ndarray:
    """``[R]`` means over seeds of per-seed weighted means: ``values [S, N]``, example weights ``[R, N]``."""
    per_seed = (weights @ values.T) / weights.sum(1, keepdims=True)  # [R, S]
    if seed_idx is None:
        return per_seed.mean(1)
    return np.take_along_axis(per_seed, seed_idx, axis=1).mean(1)


def _draws(n: int, seeds: int, n_resamples: int, rng: np.random.Generator, weights: np.ndarray | None = None):
    """Bootstrap multiplicities of the examples ``[R, N]`` (times the examples' own ``weights``) and seed picks."""
    draws = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_resamples)]).astype(np.float64)
    return draws if weights is None else draws * weights[None, :], rng.integers(0, seeds, (n_resamples, seeds))


def _weights(weights, n: int) -> np.ndarray | None:
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not (w > 0).all():
        raise ValueError(f"weights: one positive weight per example ({n}), got shape {w.shape}")
    return w


def _per_seed(v: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    return v.mean(1) if w is None else (v @ w) / w.sum()


def accuracy_intervals(values, n_resamples: int = 2000, level: float = 0.95, seed: int = 0, weights=None) -> dict:
    """``values``: ``[S, N]`` per-example scores (e.g. exact match 0/1) of ``S`` training seeds on the same
    ``N`` examples; ``weights`` ``[N]``: the examples' weights in the mean (answer tokens per example, for the
    token accuracy: ``values`` are then each example's fraction of answer tokens right). Returns the mean over
    seeds of the (weighted) mean over examples (``mean``), its intervals over examples (``ci_examples``,
    percentile bootstrap), over seeds (``ci_seeds``: the percentile bootstrap of the seeds, kept for
    comparison; None with one seed) and the one the reports use (``ci``: Student's t over seeds plus the
    example spread, :mod:`.seed_inference`, cut to [0, 1]; ``method`` says which), and the per-seed means."""
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    s, n = v.shape
    ex_w = _weights(weights, n)
    rng = np.random.default_rng(seed)
    per_seed = _per_seed(v, ex_w)
    out = {"mean": float(per_seed.mean()), "per_seed": [float(x) for x in per_seed], "seeds": s, "n_examples": n,
           "level": level, "n_resamples": n_resamples}
    w, picks = _draws(n, s, n_resamples, rng, ex_w)
    by_examples = _rates(v, w, None)
    out["ci_examples"] = percentile_interval(by_examples, level)
    ones = np.ones((1, n)) if ex_w is None else ex_w[None, :]
    out["ci_seeds"] = (percentile_interval(_rates(v, np.repeat(ones, n_resamples, 0), picks), level)
                       if s > 1 else None)
    inference = seed_interval(out["mean"], per_seed, float(by_examples.std(ddof=1)), level, bounds=(0.0, 1.0))
    out["ci"], out["method"] = _clip(inference["ci"], 0.0), inference["method"]
    return out


def _clip(ci: tuple[float, float], low: float) -> tuple[float, float]:
    """A t interval cut to the values the quantity can take (an accuracy in [0, 1], a difference of two in
    [-1, 1]): with two or three seeds it can reach past them, and the true value never lies there."""
    return max(low, ci[0]), min(1.0, ci[1])


def paired_difference(base, other, n_resamples: int = 2000, level: float = 0.95, seed: int = 0,
                      weights=None) -> dict:
    """``mean(other) - mean(base)`` of two ``[S, N]`` per-example scores on the same ``N`` examples (each
    averaged over its own seeds; ``weights`` as in :func:`accuracy_intervals`), with intervals: ``ci`` from
    Student's t over seeds (paired seed by seed when both have as many seeds: seed ``k`` of every model starts
    from the same weights and data) plus the spread over examples (paired: the same examples for both),
    :mod:`.seed_inference`, cut to [-1, 1]; ``p_value`` its two-sided p-value, ``se`` and ``df`` (for corrections across
    comparisons and equivalence tests, :func:`~hf_trajpe.evaluation.verdicts.judge_family`); ``ci_examples``
    examples only; ``ci_equivalence``: the ``2 level - 1`` interval; ``zero_spread``: every seed gave the same
    difference, so the exact sign-flip bound replaced t (never certainty, never equivalence); ``degenerate``
    (``both at floor``/``both at ceiling``) when neither model varies, where no verdict can be drawn."""
    b = np.atleast_2d(np.asarray(base, dtype=np.float64))
    o = np.atleast_2d(np.asarray(other, dtype=np.float64))
    if b.shape[1] != o.shape[1]:
        raise ValueError(f"the two models were scored on different examples: {b.shape} vs {o.shape}")
    ex_w = _weights(weights, b.shape[1])
    rng = np.random.default_rng(seed)
    w, _ = _draws(b.shape[1], b.shape[0], n_resamples, rng, ex_w)
    examples = _rates(o, w, None) - _rates(b, w, None)
    per_b, per_o = _per_seed(b, ex_w), _per_seed(o, ex_w)
    difference = float(per_o.mean() - per_b.mean())
    out = {"difference": difference, "level": level, "n_resamples": n_resamples,
           "ci_examples": percentile_interval(examples, level), "equivalence_level": 2 * level - 1}
    example_sd = float(examples.std(ddof=1))
    if b.shape[0] == o.shape[0]:  # the same seeds: same initial weights and batches, paired seed by seed
        inference = seed_interval(difference, per_o - per_b, example_sd, level, bounds=(-1.0, 1.0))
    else:
        inference = seed_interval(difference, per_o, example_sd, level, per_seed_other=per_b, bounds=(-1.0, 1.0))
    out.update(ci=_clip(inference["ci"], -1.0), ci_equivalence=_clip(inference["ci_equivalence"], -1.0),
               p_value=inference["p_value"], se=inference["se"], df=inference["df"], method=inference["method"],
               zero_spread=inference["zero_spread"])
    for value, label in ((0.0, "both at floor"), (1.0, "both at ceiling")):
        if bool((b == value).all() and (o == value).all()):
            out["degenerate"] = label  # no comparison can be made: neither model varies
    return out
