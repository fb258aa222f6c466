"""The remap's attention without a score matrix on the CPU: per block of queries (blocks.py), the keys cut into
*segments*, each one call of torch's fused CPU attention kernel with its log-sum-exp, merged exactly.

Per region, the segments are the keys where it occurs for the block, and within them the run of keys where every
pair of the block is that region's and allowed, which needs no mask (Self-Extend's far keys, DCA's earlier
chunks: most of a long read). The scores are never written, and the only extra work is in the masked segments
where regions meet (a band of about ``block`` keys per region boundary, plus the causal diagonal), whose pairs of
another region the kernel scores and masks. Where a region occurs is read from the block's smallest and largest
query position, because a region never decreases with the query position (``RemapScheme.region_index``).

A segment's attention is ``softmax`` over the segment alone, so the kernel returns ``o_s`` and ``lse_s``
(``log sum exp`` of the segment's scores), merged by :func:`~.base.merge_by_lse`. A learned sink logit per head
(gpt-oss) is one more term of ``lse`` with no output.

The kernel is ``aten::_scaled_dot_product_flash_attention_for_cpu``, the one behind
``scaled_dot_product_attention`` on the CPU, called directly because the public function does not return
``lse``. Being private, it is used only where it is known to exist with this signature (torch
:data:`MIN_TORCH` and later), on the CPU, and without autograd (its ``lse`` has no gradient).

Shape legend: ``b`` batch, ``g`` key/value heads, ``m`` rows of one key/value head (its query heads x the
block's queries), ``w`` keys of a segment, ``d`` head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import RemapCall, merge_by_lse
from .blocks import BlockKernel, BlockMask, span

__all__ = ["MIN_TORCH", "PURE_RUN", "CpuFused", "Segment", "segment_attention"]

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
    return merge_by_lse(outputs, lses, value.dtype, sinks, rep)


#: the fewest keys of a region in which every pair is that region's and allowed, scored as a segment of its own
#: (without a mask) rather than inside the masked rest
PURE_RUN = 64


def _segments(scheme, queries: torch.Tensor, keys: torch.Tensor, mask: BlockMask, count: int) -> list[Segment]:
    """The segments of a block: per region, the keys where some pair of the block is in it and allowed, split
    around its first run of at least :data:`PURE_RUN` keys in which every pair is (scored without a mask).

    Which regions a key meets is read from the block's smallest and largest query position alone: a scheme's
    region does not decrease with the query position (``RemapScheme.region_index``), so the regions of a key's
    pairs lie between those two. Only the masked ranges get the region of every pair. ``queries``: the block's
    positions ``[b, rows]``; ``keys``: ``[b, t]``."""
    some, every = mask.columns()
    window = span(some)
    if window is None:
        return []
    lo, hi = window
    near = queries.amin(dim=1, keepdim=True)[:, :, None]
    far = queries.amax(dim=1, keepdim=True)[:, :, None]
    least = scheme.region_index(near, keys[:, None, lo:hi]).amin(dim=(0, 1))  # [k]
    most = scheme.region_index(far, keys[:, None, lo:hi]).amax(dim=(0, 1))
    some, every = some[lo:hi], every[lo:hi]

    def masked(region: int, a: int, z: int) -> Segment:
        pairs = scheme.region_index(queries[:, :, None], keys[:, None, lo + a:lo + z])[:, None] == region
        return Segment(region, lo + a, lo + z, pairs & mask.pairs(lo + a, lo + z))

    segments = []
    for region in range(count):
        box = span(some & (least <= region) & (most >= region))
        if box is None:
            continue
        a, z = box
        run = span((every & (least == region) & (most == region))[a:z])
        if run is not None:
            p0 = run[0]
            rest = span(~(every & (least == region) & (most == region))[a + p0:z])
            p1 = z - a if rest is None else p0 + rest[0]
            if p1 - p0 >= PURE_RUN:
                if p0:
                    segments.append(masked(region, a, a + p0))
                segments.append(Segment(region, lo + a + p0, lo + a + p1, None))
                if a + p1 < z:
                    segments.append(masked(region, a + p1, z))
                continue
        segments.append(masked(region, a, z))
    return segments


class CpuFused(BlockKernel):
    """Segments of torch's fused CPU kernel (module docstring): the fastest on the CPU, without autograd."""

    name = "cpu_fused"

    def refusal(self, call: RemapCall) -> str | None:
        if _KERNEL is None:
            return (f"torch {torch.__version__} does not offer the fused CPU attention kernel with its log-sum-exp "
                    f"(torch {'.'.join(map(str, MIN_TORCH))} or later)")
        tensors = [x for x in (call.query, call.key, call.value, call.sinks) if x is not None]
        devices = sorted({x.device.type for x in tensors} - {"cpu"})
        if devices:
            return f"it runs on the CPU only, and this attention runs on {devices[0]}"
        if call.needs_grad:
            return "its log-sum-exp has no gradient, and autograd runs through this attention"
        if call.dropout:
            return "it has no attention dropout (the model is in training mode with attention dropout)"
        if call.softcap is not None:
            return "it cannot soft-cap the scores (this model caps its attention logits)"
        if call.query.shape[-1] != call.value.shape[-1]:
            return "it needs queries and values of one width"
        return None

    def plan_block(self, call: RemapCall, mask: BlockMask, start: int, stop: int) -> list[Segment]:
        return _segments(call.st.scheme, call.query_positions[:, start:stop], call.key_positions, mask,
                         len(call.tables))

    def block(self, call, keys, queries, start, stop, mask, plan):
        b, g, d = call.query.shape[0], call.value.shape[1], call.query.shape[-1]
        rep, rows = call.query.shape[1] // g, stop - start
        return segment_attention([q.reshape(b, g, rep * rows, d) for q in queries],
                                 lambda index, a, z: keys(call.which[index], a, z), call.value, plan, call.scaling,
                                 rep, call.sinks)
