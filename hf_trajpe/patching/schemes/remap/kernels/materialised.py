"""The remap's attention with its scores built, a block of queries at a time (blocks.py): per region the product
of the block's queries with that region's keys over the block's key window, per pair its region's score
(``torch.where``), masked, one softmax in float32 at least, times the values.

It runs every input: autograd, attention dropout, soft-capped logits, sinks, any device and dtype. It is the
reference the other kernels are tested against, and what ``kernel="auto"`` falls back to.

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``rows`` queries of the block, ``k`` keys
of its window, ``d`` head width.
"""

from __future__ import annotations

import torch

from .base import RemapCall
from .blocks import BlockKernel, span

__all__ = ["Materialised"]


class Materialised(BlockKernel):
    """Scores built per block (module docstring): runs every input."""

    name = "materialised"

    def block(self, call: RemapCall, keys, queries, start, stop, mask, plan) -> torch.Tensor:
        # the keys some query of the block attends to: causal attention reads only up to the last query
        lo, hi = span(mask.columns()[0]) or (0, call.key.shape[2])
        region = call.st.scheme.region_index(call.query_positions[:, start:stop, None],
                                             call.key_positions[:, None, lo:hi])[:, None]
        return _materialised(queries, [keys(call.which[index], lo, hi) for index in range(len(queries))],
                             call.value[:, :, lo:hi], region, mask.pairs(lo, hi), call.scaling, call.softcap,
                             call.sinks, call.dropout)


def _materialised(queries: list[torch.Tensor], keys: list[torch.Tensor], value: torch.Tensor, region: torch.Tensor,
                  allowed: torch.Tensor, scaling: float, softcap: float | None, sinks: torch.Tensor | None,
                  dropout: float) -> torch.Tensor:
    """One block's attention ``[b, g, rep x rows, d]`` with its scores built whole: per region the product of
    the block's queries ``[b, h, rows, d]`` with that region's keys ``[b, g, k, d]`` (the block's key window),
    per pair its region's score, one softmax (float32 at least). For autograd, dropout, soft-capping and
    devices without the fused kernel."""
    b, h, rows, d = queries[0].shape
    g, k = keys[0].shape[1], keys[0].shape[2]
    rep = h // g
    scores = None
    for index, (q, kk) in enumerate(zip(queries, keys, strict=True)):
        s = torch.matmul(q.reshape(b, g, rep * rows, d), kk.transpose(-1, -2)).view(b, h, rows, k) * scaling
        scores = s if scores is None else torch.where(region == index, s, scores)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    acc = torch.promote_types(scores.dtype, torch.float32)  # (float64 stays: its minimum is -inf in float32)
    if sinks is not None:
        column = sinks.reshape(1, h, 1, 1).expand(b, h, rows, 1).to(scores.dtype)
        probs = torch.softmax(torch.cat((scores, column), dim=-1), dim=-1, dtype=acc)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1, dtype=acc)
    probs = probs.to(value.dtype)
    if dropout:
        probs = torch.nn.functional.dropout(probs, p=dropout, training=True)
    return torch.matmul(probs.view(b, g, rep * rows, k), value)
