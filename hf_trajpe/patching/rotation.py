"""Half-split RoPE inside attention as one autograd function that does not keep the unrotated q/k.

Written with plain tensor ops (``apply_rotary``), autograd keeps ``x`` and ``rotate_half(x)`` of every
query and key for the backward once ``cos``/``sin`` need a gradient (trajectory positions), and ``cos``
and ``sin`` otherwise: two to four extra ``[b, h, n, d]`` tensors per layer (docs/benchmarks.md).
:class:`Rotate` computes the same forward, op for op (bit-identical values), and its backward needs
only ``cos``/``sin`` (built once per forward and shared by all layers) for the gradient of ``x``: the
rotation is linear, so that gradient is the incoming one rotated back. When ``cos``/``sin`` need a
gradient as well, it saves the rotated output, which attention keeps anyway, and recovers ``x`` from it
by inverting each 2 x 2 rotation (exact up to rounding, also for interpolated tables, whose
``cos^2 + sin^2`` is not 1).

Shape legend: ``b`` batch, ``h`` heads, ``n`` tokens, ``d`` head width (all of it rotates).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..encodings.rotary import rotate_half

__all__ = ["Rotate", "inference_tables", "rotate", "rotate_part"]


def _halves(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    half = t.shape[-1] // 2
    return t[..., :half], t[..., half:]


class Rotate(torch.autograd.Function):
    """``x * cos + rotate_half(x) * sin`` (``x``: ``[b, h, n, d]``; ``cos``/``sin``: ``[b, n, d]``)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        cos4, sin4 = cos.unsqueeze(1), sin.unsqueeze(1)
        y = (x * cos4) + (rotate_half(x) * sin4)  # the ops of apply_rotary, in its order: same bits
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            ctx.save_for_backward(cos, sin, y)  # y: the tensor attention saves anyway, not a copy
        else:
            ctx.save_for_backward(cos, sin)
        ctx.x_shape = x.shape
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        cos, sin = ctx.saved_tensors[:2]
        cos4, sin4 = cos.unsqueeze(1), sin.unsqueeze(1)
        grad_x = grad_cos = grad_sin = None
        if ctx.needs_input_grad[0]:
            # transpose of the rotation: d/dx of rotate_half(x) . u is -rotate_half(u)
            grad_x = grad * cos4 - rotate_half(grad * sin4)
            grad_x = grad_x.sum_to_size(ctx.x_shape) if grad_x.shape != ctx.x_shape else grad_x
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            x = _unrotate(ctx.saved_tensors[2], cos4, sin4)
            if ctx.needs_input_grad[1]:
                grad_cos = (grad * x).sum(dim=1)
                grad_cos = grad_cos.sum_to_size(cos.shape) if grad_cos.shape != cos.shape else grad_cos
            if ctx.needs_input_grad[2]:
                grad_sin = (grad * rotate_half(x)).sum(dim=1)
                grad_sin = grad_sin.sum_to_size(sin.shape) if grad_sin.shape != sin.shape else grad_sin
        return grad_x, grad_cos, grad_sin


def _unrotate(y: torch.Tensor, cos4: torch.Tensor, sin4: torch.Tensor) -> torch.Tensor:
    """``x`` from ``y = x * cos + rotate_half(x) * sin``: per pair ``(x1, x2)`` the forward is
    ``y1 = c1 x1 - s1 x2``, ``y2 = s2 x1 + c2 x2``; solved with its determinant, so it holds for
    any ``cos``/``sin`` (an interpolated table is not a pure rotation)."""
    y1, y2 = _halves(y)
    c1, c2 = _halves(cos4)
    s1, s2 = _halves(sin4)
    inv = 1.0 / (c1 * c2 + s1 * s2)  # [b, 1, n, d/2]: small
    return torch.cat(((c2 * y1 + s1 * y2) * inv, (c1 * y2 - s2 * y1) * inv), dim=-1)


def inference_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and the signed ``sin`` ``[b, 1, n, d]`` with which :func:`rotate` rotates without autograd in
    four ops: ``rotate_half(x) * sin`` is ``roll(x, d/2) * [-sin_1, sin_2]`` bit for bit (the same
    products up to an exact sign). Built once per forward and passed to every call."""
    half = sin.shape[-1] // 2
    return cos.unsqueeze(1), torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).unsqueeze(1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           tables: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Rotate ``x`` ``[b, h, n, d]`` by ``cos``/``sin`` ``[b, n, d]`` (half-split layout, full width);
    the values of ``apply_rotary(x, x, cos, sin)[0]``, with a backward that keeps no copy of ``x``.
    ``tables``: :func:`inference_tables` of ``cos``/``sin``, for the path without autograd."""
    if cos.shape[-1] != x.shape[-1] or x.shape[-1] % 2:
        raise ValueError(f"rotate: cos/sin width {cos.shape[-1]} must equal the even head width {x.shape[-1]}")
    if not (torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)):
        cos4, signed_sin4 = tables if tables is not None else inference_tables(cos, sin)
        return (x * cos4) + (x.roll(x.shape[-1] // 2, dims=-1) * signed_sin4)
    return Rotate.apply(x, cos, sin)


def rotate_part(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                tables: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``x`` ``[b, h, n, d]`` with its first ``r`` dimensions rotated by ``cos``/``sin`` ``[b, n, r]`` (half-split
    among themselves) and the rest passed through: GPT-NeoX's and Phi's partial rotary, op for op."""
    width = cos.shape[-1]
    if width == x.shape[-1]:
        return rotate(x, cos, sin, tables)
    return torch.cat((rotate(x[..., :width], cos, sin, tables), x[..., width:]), dim=-1)
