"""Rotary position embedding (RoPE) at integer or fractional positions (docs/spec.md, section 2.3).

Numerics follow transformers' Llama rotary module (float32 frequencies, ``cos``/``sin`` cast to
the activation dtype at the end), so patching a RoPE model with ``"rope"`` reproduces it.
Two layouts exist in HF models: ``"half"`` pairs dimension ``k`` with ``k + r/2`` (Llama, Mistral,
Qwen2, GPT-NeoX: ``rotate_half``) and ``"interleaved"`` pairs ``2k`` with ``2k+1`` (GPT-J, CodeGen).

Shape legend: ``b`` batch, ``h`` heads, ``n`` sequence, ``r`` rotary width (<= head width ``e``).
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["RotaryLayout", "rotary_inv_freq", "rotary_cos_sin", "rotate_half", "rotate_every_two",
           "apply_rotary"]

RotaryLayout = Literal["half", "interleaved"]
_LAYOUTS = ("half", "interleaved")


def _check_layout(layout: str) -> None:
    if layout not in _LAYOUTS:
        raise ValueError(f"unknown rotary layout {layout!r}; use one of {_LAYOUTS}")


def rotary_inv_freq(dim: int, base: float = 10000.0, device: torch.device | str | None = None) -> torch.Tensor:
    """``theta_k = base^(-2k/dim)``, shape ``[dim/2]``, computed exactly as transformers does."""
    if not isinstance(dim, int) or dim <= 0 or dim % 2:
        raise ValueError(f"rotary dim must be a positive even integer, got {dim!r}")
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))


def rotary_cos_sin(
    positions: torch.Tensor,
    dim: int | None = None,
    base: float = 10000.0,
    layout: RotaryLayout = "half",
    *,
    inv_freq: torch.Tensor | None = None,
    attention_scaling: float = 1.0,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos``/``sin`` of ``p * theta_k`` laid out for ``layout``: ``[...] -> [..., r]`` each.

    Pass ``inv_freq`` to reuse a model's own (possibly scaled) frequencies; otherwise ``dim`` and
    ``base`` define them. Angles are formed in float32 whatever ``dtype`` the result is cast to.
    """
    _check_layout(layout)
    if inv_freq is None:
        if dim is None:
            raise ValueError("rotary_cos_sin needs either dim or inv_freq")
        inv_freq = rotary_inv_freq(dim, base, device=positions.device)
    freqs = positions[..., None].float() * inv_freq.to(device=positions.device, dtype=torch.float)
    if layout == "half":
        emb = torch.cat((freqs, freqs), dim=-1)
    else:
        emb = freqs.repeat_interleave(2, dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if attention_scaling != 1.0:  # (x * 1.0 is x bit for bit: two ops saved per forward)
        cos, sin = cos * attention_scaling, sin * attention_scaling
    if dtype is not None:
        cos, sin = cos.to(dtype), sin.to(dtype)
    return cos, sin


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: RotaryLayout = "half",
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q``/``k`` (``[b, h, n, e]`` with the default ``unsqueeze_dim=1``) by ``cos``/``sin``
    (``[b, n, r]``). When ``r < e`` only the first ``r`` dimensions rotate (partial rotary,
    GPT-NeoX style) and the rest pass through.
    """
    _check_layout(layout)
    rot = rotate_half if layout == "half" else rotate_every_two
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    r = cos.shape[-1]

    def _apply(x: torch.Tensor) -> torch.Tensor:
        if r == x.shape[-1]:
            return (x * cos) + (rot(x) * sin)
        x_rot, x_pass = x[..., :r], x[..., r:]
        return torch.cat(((x_rot * cos) + (rot(x_rot) * sin), x_pass), dim=-1)

    return _apply(q), _apply(k)
