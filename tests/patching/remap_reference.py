"""Reference forwards for the remap encodings (Self-Extend, ReRoPE, dual chunk attention, STRING), written from
the papers' formulas, never from hf_trajpe.

Each method gives a query-key pair ``(i, j)`` (ranks of the real tokens) a relative distance ``delta(i, j)``
(:data:`DISTANCES`, one formula per method, in float64). The reference forward is the stock model with its
rotary module made the identity and its attention replaced by float64 attention in which the score of a pair
is ``q_i . R(delta(i, j) * theta) k_j``: the query turned by the pair's own angle per frequency, the key not at
all (a rotation by ``p_q`` and ``p_k`` gives the same score for ``delta = p_q - p_k``). The frequencies are the
model's own rotary buffers (``inv_freq``, ``attention_scaling``: read from transformers' module, or from one
built by transformers from an extended config), rotating the first ``2 * len(inv_freq)`` dimensions of each
head half-split, the rest unrotated. Per layer a distance function may be given (layer selections).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import torch
from reference_forward import STOCK, _IdentityRotary, _path, _swapped, rank_positions
from torch import nn

__all__ = ["DISTANCES", "remap_reference_logits"]

ATTENTION_NAME = "hf_trajpe_test_remap_reference"


def self_extend(i, j, group_size, window):
    """Jin et al. 2024: neighbours (i - j < W) keep their distance; others: (i // G + W - W // G) - j // G."""
    grouped = (i // group_size + window - window // group_size) - j // group_size
    return np.where(i - j < window, i - j, grouped)


def rerope(i, j, window, leak=None):
    """Su 2023: min(i - j, w); leaky: w + (i - j - w) / k past the window."""
    d = i - j
    if leak is None:
        return np.minimum(d, window)
    return np.where(d < window, d, window + (d - window) / leak)


def dca(i, j, chunk_size, local_window):
    """An et al. 2024 (ChunkLlama): chunks of c = chunk_size - local_window; keys at j mod c; the query at
    i mod c (same chunk), min(i mod c + c, chunk_size) (the previous chunk), min(2c - 1, chunk_size) (earlier)."""
    c = chunk_size - local_window
    apart = i // c - j // c
    succ = np.minimum(i % c + c, chunk_size) - j % c
    inter = min(2 * c - 1, chunk_size) - j % c
    return np.where(apart <= 0, i - j, np.where(apart == 1, succ, inter))


def string(i, j, shift, local_window):
    """An et al. 2025: d < S keeps d; d >= S becomes d - S + W; S = 0 is plain RoPE."""
    d = i - j
    if shift == 0:
        return d
    return np.where(d < shift, d, d - shift + local_window)


DISTANCES: dict[str, Callable] = {"self_extend": self_extend, "rerope": rerope, "dca": dca, "string": string}


def plain(i, j):
    """The stock distance (RoPE)."""
    return i - j


_STATE: list[dict] = []


def _reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """softmax(q_i . R(delta_ij) k_j * scaling + mask) v in float64; causal and padding from the ranks."""
    state = _STATE[-1]
    b, h, n, d = query.shape
    if key.shape[2] != n:
        raise NotImplementedError("the reference attention runs whole sequences, without a KV cache")
    rep = h // key.shape[1]
    q = query.detach().double().numpy()
    k = key.detach().double().repeat_interleave(rep, dim=1).numpy()
    v = value.detach().double().repeat_interleave(rep, dim=1).numpy()
    positions, real = state["positions"], state["real"]
    distance = state["layers"].get(module.layer_idx, state["distance"])
    i, j = positions[:, :, None], positions[:, None, :]
    delta = distance(i, j)  # [b, n, t]
    inv_freq, a = state["inv_freq"], state["attention_scaling"]
    half = inv_freq.shape[0]
    angle = delta[:, None, :, :, None] * inv_freq  # [b, 1, n, t, r/2]
    cos, sin = np.cos(angle), np.sin(angle)
    q1, q2 = q[..., None, :half], q[..., None, half:2 * half]  # [b, h, n, 1, r/2]
    k1, k2 = k[:, :, None, :, :half], k[:, :, None, :, half:2 * half]  # [b, h, 1, t, r/2]
    turned1, turned2 = q1 * cos - q2 * sin, q1 * sin + q2 * cos
    rotated = (turned1 * k1 + turned2 * k2).sum(-1) * a * a
    passed = q[..., 2 * half:] @ k[..., 2 * half:].transpose(0, 1, 3, 2)
    scores = (rotated + passed) * (d ** -0.5 if scaling is None else scaling)
    causal = (positions[:, :, None] >= positions[:, None, :])[:, None]
    allowed = real[:, None, None, :] & causal & real[:, None, :, None]
    scores = np.where(allowed, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(scores - top)
    total = weights.sum(-1, keepdims=True)
    probs = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)  # a pad query: zeros
    out = torch.from_numpy(probs @ v).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, _reference_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)


_register()


@contextlib.contextmanager
def _attention(model: nn.Module, state: dict):
    stock = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    _STATE.append(state)
    try:
        yield
    finally:
        _STATE.pop()
        model.set_attn_implementation(stock)


def remap_reference_logits(model: nn.Module, family: str, ids: torch.Tensor, mask: torch.Tensor | None,
                           distance: Callable, layers: dict[int, Callable] | None = None,
                           rotary: nn.Module | None = None) -> torch.Tensor:
    """Logits of the stock ``model`` (unpatched) whose attention scores use ``distance(i, j)`` (float64 arrays of
    ranks, broadcast ``[b, n, 1]`` against ``[b, 1, t]``); ``layers``: another distance for some layers
    (``layer_idx`` -> function); ``rotary``: the module whose frequencies rotate (default the model's own)."""
    owner, name = _path(model, STOCK[family].rotary)
    rotary = rotary if rotary is not None else getattr(owner, name)
    config = model.config
    head = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    real = np.ones(tuple(ids.shape), dtype=bool) if mask is None else mask.numpy().astype(bool)
    state = {"positions": rank_positions(ids, mask), "real": real, "distance": distance, "layers": layers or {},
             "inv_freq": rotary.inv_freq.detach().double().numpy(),
             "attention_scaling": float(getattr(rotary, "attention_scaling", 1.0))}
    with _swapped(owner, name, _IdentityRotary(head)), _attention(model, state), torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits
