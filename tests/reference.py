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
