"""Float32 ALiBi attention on the CPU without subnormal intermediates, by exact power-of-two scaling.

Where they arise. ALiBi scores of far keys are very negative. SDPA's fused CPU kernel gives ``exp`` of a
score below ``ln(FLT_MIN)`` (-87.3 under the row maximum) exactly 0, but the weights just above that,
down to ``FLT_MIN = 1.2e-38``, are normal floats whose products are not: a weight times a value in the
forward (``P @ V``) and, in the backward, a weight times the gradient of its score
(``dS = P * (dP - D)``, where ``dP`` has the size of the loss gradients, 1e-5 to 1e-9) fall below
``FLT_MIN``, into the subnormal range, which x86 CPUs compute with slowly (on an Intel Xeon an ALiBi
training step of GPT-2 small took 1.19x stock, 1.05x with ``torch.set_flush_denormal(True)``;
docs/benchmarks.md). Counted in one training step of GPT-2 small at 512 tokens with ALiBi (the kernel's
arithmetic redone in full): 0.4 million subnormal ``dS`` among 16.7 million non-zero weights. The bias
itself, the causal/padding mask (its minimum plus a bias stays finite, and its ``exp`` is 0) and the
positions produce none.

The cure, without touching a process-wide floating-point mode: the kernel gets the values times
:data:`VALUE_SCALE` (its output is scaled back) and, in the backward, the gradient times
:data:`GRAD_SCALE` (the gradients of q, k, v and the mask are scaled back). A product ``P * v`` is then
normal for every ``|v| >= 2**-32`` and ``P * (dP - D)`` for every ``|dP - D| >= 2**-64``: zero subnormal
``dS`` in the count above. Multiplying by a power of two is exact in binary floating point, so every
result that involved no subnormal is bit-identical to the unscaled one, and the rest differs by terms
below ``2**-126`` of the sums they enter. Overflow would need values above ``2**96`` or score gradients
above ``2**64`` (1.8e19), far past anything finite float32 training produces.

Applied where attention runs with an ALiBi bias on the CPU in float32 with more than one query
(training and prefill, :func:`subnormal_scales`). Decoding steps are left alone: scaling the cached
values would cost a pass over them per token, for the few far keys of one query.

Shape legend: ``...`` any leading dimensions, ``d`` the last (head width).
"""

from __future__ import annotations

import torch

__all__ = ["GRAD_SCALE", "VALUE_SCALE", "narrow", "scale", "subnormal_scales", "widen"]

#: the values (and so the attention output) the kernel sees are this many times larger
VALUE_SCALE = 2.0**32
#: the score gradients the kernel computes are this many times larger
GRAD_SCALE = 2.0**64


def subnormal_scales(query: torch.Tensor) -> tuple[float, float]:
    """``(value_scale, grad_scale)`` for attention on ``query`` ``[b, h, n, d]``: the scales above for
    float32 on the CPU with more than one query, else ``(1.0, 1.0)`` (no scaling)."""
    if query.dtype != torch.float32 or query.device.type != "cpu" or query.shape[-2] < 2:
        return 1.0, 1.0
    return VALUE_SCALE, GRAD_SCALE


class _Widen(torch.autograd.Function):
    """``[x * forward_scale, extra]`` along the last dimension, written in one pass; the backward returns
    each part of the gradient times ``backward_scale``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, extra: torch.Tensor, forward_scale: float, backward_scale: float):
        d = x.shape[-1]
        out = x.new_empty(*x.shape[:-1], d + extra.shape[-1])
        if forward_scale == 1.0:
            out[..., :d].copy_(x)
        else:
            torch.mul(x, forward_scale, out=out[..., :d])
        out[..., d:].copy_(extra)  # (broadcast over the leading dimensions)
        ctx.d, ctx.scale, ctx.extra_shape = d, backward_scale, extra.shape
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        d, s = ctx.d, ctx.scale
        grad_x = grad_extra = None
        if ctx.needs_input_grad[0]:
            grad_x = grad[..., :d] if s == 1.0 else grad[..., :d] * s
        if ctx.needs_input_grad[1]:
            grad_extra = grad[..., d:] if s == 1.0 else grad[..., d:] * s
            grad_extra = grad_extra.sum_to_size(ctx.extra_shape)
        return grad_x, grad_extra, None, None


class _Narrow(torch.autograd.Function):
    """The first ``width`` columns of the last dimension times ``forward_scale``, contiguous (one pass);
    the backward pads the gradient with zero columns and multiplies it by ``backward_scale``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, width: int, forward_scale: float, backward_scale: float):
        ctx.full, ctx.scale = x.shape[-1], backward_scale
        part = x[..., :width]
        return part.contiguous() if forward_scale == 1.0 else part * forward_scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        width = grad.shape[-1]
        out = grad.new_zeros(*grad.shape[:-1], ctx.full)
        if ctx.scale == 1.0:
            out[..., :width].copy_(grad)
        else:
            torch.mul(grad, ctx.scale, out=out[..., :width])
        return out, None, None, None


class _Scale(torch.autograd.Function):
    """``x * forward_scale`` (``x`` itself for 1); the backward multiplies the gradient by ``backward_scale``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, forward_scale: float, backward_scale: float):
        ctx.scale = backward_scale
        return x.view_as(x) if forward_scale == 1.0 else x * forward_scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (grad if ctx.scale == 1.0 else grad * ctx.scale), None, None


def widen(x: torch.Tensor, extra: torch.Tensor, forward_scale: float = 1.0,
          backward_scale: float = 1.0) -> torch.Tensor:
    """``torch.cat((x * forward_scale, extra.expand(...)), -1)`` with the gradients of ``x`` and ``extra``
    multiplied by ``backward_scale``; ``extra`` broadcasts to ``x``'s leading dimensions."""
    return _Widen.apply(x, extra, float(forward_scale), float(backward_scale))


def narrow(x: torch.Tensor, width: int, forward_scale: float = 1.0, backward_scale: float = 1.0) -> torch.Tensor:
    """``(x[..., :width] * forward_scale).contiguous()`` with its gradient multiplied by ``backward_scale``."""
    return _Narrow.apply(x, int(width), float(forward_scale), float(backward_scale))


def scale(x: torch.Tensor, forward_scale: float = 1.0, backward_scale: float = 1.0) -> torch.Tensor:
    """``x * forward_scale`` with its gradient multiplied by ``backward_scale``; ``x`` unchanged when both are 1."""
    if forward_scale == 1.0 and backward_scale == 1.0:
        return x
    return _Scale.apply(x, float(forward_scale), float(backward_scale))
