"""How much of a swap's perplexity damage fine-tuning recovers, with an interval over the evaluation chunks.

    damage    = ppl_swapped / ppl_stock - 1
    recovered = (ppl_swapped - ppl_tuned) / (ppl_swapped - ppl_stock)
    gap       = ppl_tuned / ppl_reference - 1

``ppl_stock``: the pretrained model; ``ppl_swapped``: the same weights with the encoding swapped, before any
tuning; ``ppl_tuned``: the swapped model after fine-tuning; ``ppl_reference`` (optional): the pretrained model
fine-tuned the same way without a swap. ``recovered`` is 1 for full recovery (back to the stock model), 0 for
none, above 1 better than the stock model (tuning on the text helps any model), below 0 worse than the untuned
swap. ``gap`` says how far the tuned swap is from what the same tuning gives the unswapped model (0: as good),
which stays meaningful where the swap barely hurt and the share's denominator is noise.

Each perplexity is ``exp(sum of token nll / tokens)`` over the same chunks (blocks of test text) for all models;
the intervals resample the chunks with replacement, the models together (paired), and take percentile
intervals. The share is reported only where the damage is resolved (its interval above 0): where the swap did
not hurt (``ppl_swapped <= ppl_stock``) it is ``None`` with ``status`` ``"no damage"``; where the damage's
interval reaches 0, a ratio over a denominator that may be 0 has no interval (it runs off to infinity), so it is
``None`` with ``status`` ``"damage not resolved"``.
"""

from __future__ import annotations

import numpy as np

from .bootstrap import percentile_interval
from .metrics import get_metric

__all__ = ["recovery_fraction", "recovery_over_seeds"]


def _resampled(models: list[tuple], n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The models' chunk nll and token counts ``[M, N]`` and the resampling weights ``[R, N]`` of the chunks (each
    resample draws ``N`` chunks with replacement, the same for every model: paired)."""
    nll = np.stack([np.asarray(m[0], np.float64) for m in models])
    count = np.stack([np.broadcast_to(np.asarray(m[1], np.float64), nll.shape[1:]) for m in models])
    n = nll.shape[1]
    rng = np.random.default_rng(seed)
    weights = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_resamples)])
    return nll, count, weights


def recovery_fraction(stock: tuple, swapped: tuple, tuned: tuple, reference: tuple | None = None,
                      n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """``stock``, ``swapped``, ``tuned`` and optionally ``reference``: ``(nll, count)`` per chunk (``[N]`` summed
    token nll in nats, ``[N]`` scored tokens), the same ``N`` chunks in the same order. Returns the perplexities,
    ``damage`` and ``damage_ci``, ``recovered`` and ``ci`` (``None`` where undefined, ``status`` says why),
    ``gap`` and ``gap_ci`` when ``reference`` is given, and ``n_chunks``; intervals at ``level`` over
    ``n_resamples`` resamples of the chunks."""
    models = [stock, swapped, tuned] + ([reference] if reference is not None else [])
    sizes = {np.asarray(m[0]).shape for m in models}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1 or not next(iter(sizes))[0]:
        raise ValueError(f"the models must be scored on the same, non-empty chunks; got shapes {sorted(sizes)}")
    nll, count, weights = _resampled(models, n_resamples, seed)
    perplexity = get_metric("perplexity")
    ppl = perplexity(nll.sum(1), count.sum(1))
    resampled = perplexity(weights @ nll.T, weights @ count.T)  # [R, M]
    out = {"ppl_stock": float(ppl[0]), "ppl_swapped": float(ppl[1]), "ppl_tuned": float(ppl[2]),
           "n_chunks": nll.shape[1],
           "damage": float(ppl[1] / ppl[0] - 1), "damage_ci": percentile_interval(resampled[:, 1] / resampled[:, 0] - 1,
                                                                                 level),
           "recovered": None, "ci": None, "status": "resolved", "level": level, "n_resamples": n_resamples}
    if reference is not None:
        out["ppl_reference"] = float(ppl[3])
        out["gap"] = float(ppl[2] / ppl[3] - 1)
        out["gap_ci"] = percentile_interval(resampled[:, 2] / resampled[:, 3] - 1, level)
    if not ppl[1] > ppl[0]:
        out["status"] = "no damage"
        return out
    if not out["damage_ci"][0] > 0:
        out["status"] = "damage not resolved"
        return out
    out["recovered"] = float((ppl[1] - ppl[2]) / (ppl[1] - ppl[0]))
    damage = resampled[:, 1] - resampled[:, 0]
    valid = damage > 0  # (at most the interval's tail: the damage is resolved)
    out["ci"] = percentile_interval((resampled[valid, 1] - resampled[valid, 2]) / damage[valid], level)
    out["resamples_without_damage"] = int((~valid).sum())
    return out


def recovery_over_seeds(stock: tuple, swapped: tuple, tuned: list[tuple], reference: list[tuple] | None = None,
                        n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """:func:`recovery_fraction` with one tuned model per training seed (``tuned``, and ``reference`` paired with
    it by seed: the stock model tuned with the same seed). ``stock`` and ``swapped`` do not train, so the damage
    keeps its interval over chunks; the recovered share and the gap are means over seeds (the gap of the mean
    log-perplexity ratio) with an interval from Student's t over the per-seed values plus the chunks' standard
    error (:func:`~hf_trajpe.evaluation.seed_inference.seed_interval`: every seed alike gives the exact sign-flip
    bound, never a zero-width interval). One seed: exactly :func:`recovery_fraction`. Adds ``per_seed`` (each
    seed's :func:`recovery_fraction`), ``seeds`` and ``method``."""
    from .seed_inference import seed_interval

    if reference is not None and len(reference) != len(tuned):
        raise ValueError(f"one reference per tuned model (paired by seed): got {len(tuned)} tuned, "
                         f"{len(reference)} references")
    if not tuned:
        raise ValueError("at least one tuned model is needed")
    per_seed = [recovery_fraction(stock, swapped, t, None if reference is None else reference[i],
                                  n_resamples=n_resamples, level=level, seed=seed) for i, t in enumerate(tuned)]
    if len(tuned) == 1:
        return {**per_seed[0], "per_seed": per_seed, "seeds": 1, "method": "one seed: interval over chunks"}
    models = [stock, swapped, *tuned, *(reference or [])]
    nll, count, weights = _resampled(models, n_resamples, seed)
    k = len(tuned)
    log_ppl = (weights @ nll.T) / (weights @ count.T)  # [R, M]
    log_full = nll.sum(1) / count.sum(1)  # [M]
    ppl = np.exp(log_full)
    out = {key: per_seed[0][key] for key in ("ppl_stock", "ppl_swapped", "damage", "damage_ci", "n_chunks",
                                             "level", "n_resamples")}
    out.update(ppl_tuned=float(np.mean(ppl[2:2 + k])), recovered=None, ci=None, status=per_seed[0]["status"],
               per_seed=per_seed, seeds=k, method=f"t over {k} seeds plus the chunks' standard error")
    if reference is not None:
        gaps = log_full[2:2 + k] - log_full[2 + k:]  # per seed, log(ppl_tuned / ppl_reference)
        resampled = (log_ppl[:, 2:2 + k] - log_ppl[:, 2 + k:]).mean(1)
        iv = seed_interval(float(gaps.mean()), gaps, float(resampled.std(ddof=1)), level)
        out.update(ppl_reference=float(np.mean(ppl[2 + k:])), gap=float(np.expm1(gaps.mean())),
                   gap_ci=tuple(float(np.expm1(v)) for v in iv["ci"]), gap_p_value=iv["p_value"],
                   gap_method=iv["method"], gap_zero_spread=iv["zero_spread"])
    if out["status"] != "resolved":
        return out
    shares = np.array([(ppl[1] - ppl[2 + i]) / (ppl[1] - ppl[0]) for i in range(k)])
    rp = np.exp(log_ppl)
    damage = rp[:, 1] - rp[:, 0]
    valid = damage > 0
    resampled = ((rp[valid, 1:2] - rp[valid, 2:2 + k]) / damage[valid, None]).mean(1)
    iv = seed_interval(float(shares.mean()), shares, float(resampled.std(ddof=1)), level)
    out.update(recovered=float(shares.mean()), ci=tuple(float(v) for v in iv["ci"]),
               resamples_without_damage=int((~valid).sum()))
    return out
