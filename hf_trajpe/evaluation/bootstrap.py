"""Percentile bootstrap intervals, and the perplexity delta of docs/spec.md, section 4.2, with its intervals.

Delta of an encoding against a baseline, in percent: ``(ppl_base - ppl_enc) / ppl_base * 100``
(positive = the encoding is better). A model's perplexity is the mean over its training seeds of
``exp(sum of token nll / number of scored tokens)`` on the test sequences.

:func:`delta_with_intervals` gives

- ``ci_sequences``: the percentile bootstrap over test sequences (paired: the same resampled sequences for
  both models), all seeds kept;
- ``ci_seeds``: the percentile bootstrap over training seeds (only when a model has more than one seed),
  and ``ci_bootstrap``: both at once (seeds, then sequences); kept for comparison only: with three seeds a
  bootstrap of the seeds sees at most three values and is too narrow (:mod:`.seed_inference`);
- ``ci``, the interval the verdicts use, with ``p_value``, ``se``, ``df`` and ``method``: Student's t over
  seeds (the per-seed deltas, paired seed by seed when both models have as many seeds) plus the spread over
  test sequences (the standard deviation of the sequence bootstrap), :func:`~.seed_inference.seed_interval`;
  with one seed the normal interval of the sequence bootstrap;
- ``ci_equivalence``: the ``2 level - 1`` interval (90% for 95%) of the same t, the one that decides two
  one-sided tests of equivalence at ``1 - level`` (:mod:`hf_trajpe.evaluation.verdicts`).
"""

from __future__ import annotations

import numpy as np

from .metrics import get_metric
from .seed_inference import seed_interval

__all__ = ["DELTA_BOUNDS", "bootstrap_ci", "delta_pct", "delta_with_intervals", "percentile_interval"]

#: what a delta of perplexity in percent can be: at most +100 (perplexity 0), unbounded below
DELTA_BOUNDS = (-float("inf"), 100.0)


def percentile_interval(samples, level: float = 0.95) -> tuple[float, float]:
    samples = np.asarray(samples, dtype=np.float64)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(samples, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap_ci(values, statistic=np.mean, n_resamples: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile interval of ``statistic(values[idx])`` over resamples of the first axis."""
    values = np.asarray(values)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_resamples, len(values)))
    return percentile_interval([statistic(values[i]) for i in idx], level)


def delta_pct(ppl_base, ppl_enc):
    return (np.asarray(ppl_base) - np.asarray(ppl_enc)) / np.asarray(ppl_base) * 100.0


def _seed_ppl(nll: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per-seed perplexity from ``[S, N]`` sums over the sequences in the last axis."""
    return get_metric("perplexity")(nll.sum(-1), count.sum(-1))


def _resampled_ppl(nll: np.ndarray, count: np.ndarray, weights: np.ndarray,
                   seed_idx: np.ndarray | None) -> np.ndarray:
    """``[R]`` perplexities: sequence weights ``[R, N]`` (multiplicities), optional seed picks ``[R, S]``."""
    per_seed = get_metric("perplexity")(weights @ nll.T, weights @ count.T)  # [R, S]
    if seed_idx is None:
        return per_seed.mean(1)
    return np.take_along_axis(per_seed, seed_idx, axis=1).mean(1)


def delta_with_intervals(base_nll, base_count, enc_nll, enc_count, n_resamples: int = 2000,
                         level: float = 0.95, seed: int = 0) -> dict:
    """Delta (percent) of an encoding against the baseline, with its intervals (module docstring).

    ``*_nll``: ``[S, N]`` summed token nll of each test sequence (``S`` seeds, ``N`` sequences, the
    same sequences in the same order for both models); ``*_count``: ``[S, N]`` or ``[N]`` scored
    tokens per sequence. Returns ``delta_pct``, ``ci``, ``ci_equivalence``, ``p_value``, ``se``, ``df``,
    ``method``, ``ci_sequences``, ``ci_seeds`` and ``ci_bootstrap`` (None with one seed per model),
    ``ppl_base``, ``ppl_enc``, ``seeds_base``, ``seeds_enc``, ``n_sequences``.
    """
    bn, en = np.atleast_2d(np.asarray(base_nll, np.float64)), np.atleast_2d(np.asarray(enc_nll, np.float64))
    bc = np.broadcast_to(np.asarray(base_count, np.float64), bn.shape)
    ec = np.broadcast_to(np.asarray(enc_count, np.float64), en.shape)
    if bn.shape[1] != en.shape[1]:
        raise ValueError(f"baseline and encoding were scored on different sequences: {bn.shape} vs {en.shape}")
    n = bn.shape[1]
    rng = np.random.default_rng(seed)
    seeds_b, seeds_e = _seed_ppl(bn, bc), _seed_ppl(en, ec)
    ppl_b, ppl_e = seeds_b.mean(), seeds_e.mean()
    delta = float(delta_pct(ppl_b, ppl_e))
    out = {"delta_pct": delta, "ppl_base": float(ppl_b), "ppl_enc": float(ppl_e),
           "seeds_base": bn.shape[0], "seeds_enc": en.shape[0], "n_sequences": n,
           "n_resamples": n_resamples, "level": level}

    def draw(resample_seeds: bool, resample_sequences: bool, r: int) -> np.ndarray:
        if resample_sequences:
            w = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(r)]).astype(np.float64)
        else:
            w = np.ones((r, n))
        sb = rng.integers(0, bn.shape[0], (r, bn.shape[0])) if resample_seeds else None
        se = rng.integers(0, en.shape[0], (r, en.shape[0])) if resample_seeds else None
        return delta_pct(_resampled_ppl(bn, bc, w, sb), _resampled_ppl(en, ec, w, se))

    several = bn.shape[0] > 1 or en.shape[0] > 1
    sequences = draw(False, True, n_resamples)
    out["ci_sequences"] = percentile_interval(sequences, level)
    out["ci_seeds"] = percentile_interval(draw(True, False, n_resamples), level) if several else None
    out["ci_bootstrap"] = percentile_interval(draw(True, True, n_resamples), level) if several else None
    sequence_sd = float(sequences.std(ddof=1))
    if bn.shape[0] == en.shape[0]:  # seed k of both models: the same initial weights and batches
        inference = seed_interval(delta, delta_pct(seeds_b, seeds_e), sequence_sd, level, bounds=DELTA_BOUNDS)
    else:  # each model's seed spread, the other held at its mean
        inference = seed_interval(delta, delta_pct(ppl_b, seeds_e), sequence_sd, level,
                                  per_seed_other=delta_pct(seeds_b, ppl_e), bounds=DELTA_BOUNDS)
    out["equivalence_level"] = 2 * level - 1
    out.update(ci=inference["ci"], ci_equivalence=inference["ci_equivalence"], p_value=inference["p_value"],
               se=inference["se"], df=inference["df"], method=inference["method"],
               zero_spread=inference["zero_spread"])
    return out
