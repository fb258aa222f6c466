"""How much of a swap's perplexity damage fine-tuning recovers, with an interval over the evaluation chunks.

    recovered = (ppl_swapped - ppl_tuned) / (ppl_swapped - ppl_stock)

``ppl_stock``: the pretrained model; ``ppl_swapped``: the same weights with the encoding swapped, before any
tuning; ``ppl_tuned``: the swapped model after fine-tuning. 1 is full recovery (back to the stock model), 0 is
none, above 1 is better than the stock model (tuning on the text helps any model), below 0 is worse than the
untuned swap. Each perplexity is ``exp(sum of token nll / tokens)`` over the same chunks (blocks of test text)
for the three models; the interval resamples the chunks with replacement, the three models together (paired),
and takes the percentile interval of the ratio. Where the swap did not hurt (``ppl_swapped <= ppl_stock``) the
fraction is undefined (``None``).
"""

from __future__ import annotations

import numpy as np

from .bootstrap import percentile_interval

__all__ = ["recovery_fraction"]


def recovery_fraction(stock: tuple, swapped: tuple, tuned: tuple, n_resamples: int = 2000, level: float = 0.95,
                      seed: int = 0) -> dict:
    """``stock``, ``swapped``, ``tuned``: ``(nll, count)`` per chunk (``[N]`` summed token nll in nats, ``[N]``
    scored tokens), the same ``N`` chunks in the same order. Returns ``recovered`` (or ``None``), ``ci`` (the
    ``level`` percentile interval over ``n_resamples`` resamples of the chunks; ``None`` where undefined),
    the three perplexities and ``n_chunks``."""
    sizes = {np.asarray(m[0]).shape for m in (stock, swapped, tuned)}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1 or not next(iter(sizes))[0]:
        raise ValueError(f"the three models must be scored on the same, non-empty chunks; got shapes {sorted(sizes)}")
    nll = np.stack([np.asarray(m[0], np.float64) for m in (stock, swapped, tuned)])  # [3, N]
    count = np.stack([np.broadcast_to(np.asarray(m[1], np.float64), nll.shape[1:]) for m in (stock, swapped, tuned)])
    n = nll.shape[1]
    ppl = np.exp(nll.sum(1) / count.sum(1))
    out = {"ppl_stock": float(ppl[0]), "ppl_swapped": float(ppl[1]), "ppl_tuned": float(ppl[2]), "n_chunks": n,
           "recovered": None, "ci": None, "level": level, "n_resamples": n_resamples}
    if not ppl[1] > ppl[0]:
        return out
    out["recovered"] = float((ppl[1] - ppl[2]) / (ppl[1] - ppl[0]))
    rng = np.random.default_rng(seed)
    weights = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_resamples)])  # [R, N]
    resampled = np.exp((weights @ nll.T) / (weights @ count.T))  # [R, 3]
    damage = resampled[:, 1] - resampled[:, 0]
    valid = damage > 0  # a resample in which the swap did not hurt has no fraction
    ratios = (resampled[valid, 1] - resampled[valid, 2]) / damage[valid]
    out["ci"] = percentile_interval(ratios, level) if ratios.size else None
    out["resamples_without_damage"] = int((~valid).sum())
    return out
