"""Remapped attention without a score matrix: per segment of keys, torch's fused CPU attention kernel with
its log-sum-exp, the segments merged exactly.

A segment is a range of keys and the pairs of one region in it (patching/remap_attention.py plans them). Its
attention is ``softmax`` over the segment alone, so the kernel returns ``o_s`` and ``lse_s``
(``log sum exp`` of the segment's scores); the attention over all segments is
``sum_s exp(lse_s - lse) o_s`` with ``lse = log sum_s exp(lse_s)``: the same softmax, rescaled per segment,
as a flash kernel does between its key blocks. A learned sink logit per head (gpt-oss) is one more term of
``lse`` with no output.

The kernel is ``aten::_scaled_dot_product_flash_attention_for_cpu``, the one behind
``scaled_dot_product_attention`` on the CPU, called directly because the public function does not return
``lse``. Being private, it is used only where it is known to exist with this signature (torch
:data:`MIN_TORCH` and later), on the CPU, and without autograd (its ``lse`` has no gradient): anything else
runs the materialised path of remap_attention.py.

Shape legend: ``b`` batch, ``g`` key/value heads, ``m`` rows of one key/value head (its query heads x the
block's queries), ``w`` keys of a segment, ``d`` head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["MIN_TORCH", "Segment", "fused_usable", "segment_attention"]

#: the oldest torch trusted with this kernel's signature (``attn_mask`` in, ``logsumexp`` out; exercised here on
#: 2.13): older ones run the materialised path
MIN_TORCH = (2, 4)


def _kernel():
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH:
        return None
    try:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    except (AttributeError, RuntimeError):
        return None


_KERNEL = _kernel()


@dataclass(frozen=True)
class Segment:
    """Keys ``[start, stop)`` scored by ``region``'s rotations; ``pairs``: bool ``[b|1, 1, rows, stop - start]``,
    the pairs of the block in this region and allowed by the mask, or ``None`` when that is every pair."""

    region: int
    start: int
    stop: int
    pairs: torch.Tensor | None


def fused_usable(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor | None = None,
                 dropout: float = 0.0, softcap: float | None = None) -> bool:
    """Whether the fused kernel can run this attention: the kernel exists, every tensor is on the CPU, no
    autograd through it, no dropout, no soft-capping of the scores, queries and values of one width."""
    tensors = [x for x in (query, key, value, sinks) if x is not None]
    return (_KERNEL is not None and not dropout and softcap is None and query.shape[-1] == value.shape[-1]
            and all(x.device.type == "cpu" for x in tensors)
            and not (torch.is_grad_enabled() and any(x.requires_grad for x in tensors)))


def _bias(pairs: torch.Tensor, rep: int, dtype: torch.dtype) -> torch.Tensor:
    """The kernel's additive mask ``[b|1, 1, rep x rows, w]`` (0 or ``-inf``) from ``pairs``, repeated for the
    ``rep`` query heads laid out as rows of one key/value head."""
    if rep > 1:
        b, _, rows, w = pairs.shape
        pairs = pairs[:, :, None].expand(b, 1, rep, rows, w).reshape(b, 1, rep * rows, w)
    zero, minus = torch.zeros((), dtype=dtype), torch.full((), float("-inf"), dtype=dtype)
    return torch.where(pairs, zero, minus)


def segment_attention(queries: list[torch.Tensor], keys, value: torch.Tensor, segments: list[Segment],
                      scaling: float, rep: int, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """The attention ``[b, g, m, d]`` of the rotated queries of each region (``queries[region]``, ``[b, g, m, d]``)
    over ``segments``; ``keys(region, start, stop)`` gives that region's rotated keys ``[b, g, w, d]``;
    ``sinks``: a logit per query head ``[h]``, or ``None``. A query with no key in any segment gets zeros."""
    outputs, lses = [], []
    for seg in segments:
        query = queries[seg.region]
        bias = None if seg.pairs is None else _bias(seg.pairs, rep, query.dtype)
        out, lse = _KERNEL(query, keys(seg.region, seg.start, seg.stop), value[:, :, seg.start:seg.stop], 0.0,
                           False, attn_mask=bias, scale=scaling)
        if seg.pairs is not None:  # the kernel gives a query with no key in the segment lse 0: none of it
            seen = seg.pairs.any(dim=-1)
            if rep > 1:
                seen = seen[:, :, None].expand(seen.shape[0], 1, rep, seen.shape[-1]).reshape(seen.shape[0], 1, -1)
            lse = lse.masked_fill(~seen, float("-inf"))
        outputs.append(out)
        lses.append(lse)
    b, g, m, d = queries[0].shape
    if not outputs:
        return queries[0].new_zeros(b, g, m, d)
    if len(outputs) == 1 and sinks is None and segments[0].pairs is None:
        return outputs[0]
    stacked = torch.stack(lses)  # [s, b, g, m]
    total = torch.logsumexp(stacked, dim=0)
    if sinks is not None:
        sink = sinks.to(torch.float32).reshape(1, g, rep, 1).expand(b, g, rep, m // rep).reshape(b, g, m)
        total = torch.logaddexp(total, sink)
    acc = torch.promote_types(value.dtype, torch.float32)
    weights = torch.exp(stacked - total).nan_to_num_(0.0).to(acc)  # a query with no key at all: -inf - -inf
    merged = outputs[0].to(acc) * weights[0, ..., None]
    for out, weight in zip(outputs[1:], weights[1:], strict=True):
        merged.addcmul_(out.to(acc), weight[..., None])
    return merged.to(value.dtype)
