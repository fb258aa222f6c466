"""Independent NumPy references, written from the formulas of docs/spec.md, section 2 (float64, plain loops where
that is clearest). They never call hf_trajpe."""

from __future__ import annotations

import math

import numpy as np


def sinusoidal(positions: np.ndarray, dim: int, base: float = 10000.0) -> np.ndarray:
    positions = np.asarray(positions, dtype=np.float64)
    out = np.zeros(positions.shape + (dim,))
    for k in range(dim // 2):
        w = base ** (-2.0 * k / dim)
        out[..., 2 * k] = np.sin(positions * w)
        out[..., 2 * k + 1] = np.cos(positions * w)
    return out


def trajectory(embeddings: np.ndarray, mask: np.ndarray | None = None, strength: float = 0.2,
               beta: float = 2.0, max_positions: int | None = None) -> np.ndarray:
    """One sequence at a time: drop pads, walk the real tokens, put positions back in place."""
    emb = np.asarray(embeddings, dtype=np.float64)
    b, n, _ = emb.shape
    mask = np.ones((b, n), dtype=bool) if mask is None else np.asarray(mask).astype(bool)
    out = np.zeros((b, n))
    for r in range(b):
        idx = np.nonzero(mask[r])[0]
        e = emb[r, idx]
        disp, pos = 0.0, []
        for i in range(len(idx)):
            if i > 0:
                disp += strength * math.tanh(beta * np.linalg.norm(e[i] - e[i - 1]))
            p = i + disp
            if max_positions is not None:
                p = min(max(p, 0.0), max_positions - 1)
            pos.append(p)
        out[r, idx] = pos
    return out


def alibi_slopes(n: int) -> list[float]:
    """The ALiBi paper's reference rule (github.com/ofirpress/attention_with_linear_biases)."""

    def pow2(m: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start**i for i in range(m)]

    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def rope_rotate(x: np.ndarray, positions: np.ndarray, base: float = 10000.0, layout: str = "half") -> np.ndarray:
    """Rotate each dimension pair of ``x`` ``[n, e]`` by ``p * theta_k`` (2x2 rotation matrices)."""
    x = np.asarray(x, dtype=np.float64)
    n, e = x.shape
    out = np.empty_like(x)
    for k in range(e // 2):
        theta = base ** (-2.0 * k / e)
        a, b = (k, k + e // 2) if layout == "half" else (2 * k, 2 * k + 1)
        ang = np.asarray(positions, dtype=np.float64) * theta
        c, s = np.cos(ang), np.sin(ang)
        out[:, a] = x[:, a] * c - x[:, b] * s
        out[:, b] = x[:, a] * s + x[:, b] * c
    return out


def cope_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray, vectors: np.ndarray, scaling: float,
                   real: np.ndarray | None = None, position_scale: float = 1.0) -> np.ndarray:
    """Causal self-attention of one sequence with CoPE (docs/spec.md, section 2.15), plain loops.

    ``query`` ``[h, n, e]``; ``key``, ``value`` ``[hk, n, e]`` (query head ``a`` reads key/value head
    ``a // (h // hk)``); ``vectors`` ``[e, npos_max]``; ``real`` bool ``[n]`` (pads ``False``). Query ``i``
    attends to the real keys ``j <= i``: gates ``g_ij = sigmoid(scaling q_i.k_j)``, positions
    ``p_ij = min(sum of g_ik over real k in [j, i], npos_max - 1)``, ``e(p)`` interpolated linearly
    between columns ``floor(p)`` and ``ceil(p)``, scores ``scaling q_i.k_j + position_scale q_i.e(p_ij)``
    (``position_scale`` 1: the paper's listing; ``1/sqrt(e)``: the reference repository's). Rows of pad
    queries are zero."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (query, key, value))
    vec = np.asarray(vectors, dtype=np.float64)
    h, n, e = q.shape
    group = h // k.shape[0]
    npos = vec.shape[1]
    real = np.ones(n, dtype=bool) if real is None else np.asarray(real).astype(bool)
    out = np.zeros((h, n, e))
    for a in range(h):
        kk, vv = k[a // group], v[a // group]
        for i in range(n):
            if not real[i]:
                continue
            keys = [j for j in range(i + 1) if real[j]]
            gate = {j: 1.0 / (1.0 + math.exp(-scaling * float(q[a, i] @ kk[j]))) for j in keys}
            scores = []
            for j in keys:
                p = min(sum(gate[m] for m in keys if m >= j), npos - 1)
                lo, hi = math.floor(p), math.ceil(p)
                w = p - lo
                e_p = (1.0 - w) * vec[:, lo] + w * vec[:, hi]
                scores.append(scaling * float(q[a, i] @ kk[j]) + position_scale * float(q[a, i] @ e_p))
            s = np.array(scores)
            att = np.exp(s - s.max())
            att /= att.sum()
            out[a, i] = sum(w_j * vv[j] for w_j, j in zip(att, keys, strict=True))
    return out
