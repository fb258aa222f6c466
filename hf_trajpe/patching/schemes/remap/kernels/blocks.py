"""The block loop of the remap kernels that compute a block of queries at a time (``cpu_fused.py``,
``materialised.py``).

Queries run in blocks (at most :data:`BLOCK_QUERIES`, fewer when ``b x h x block x t`` scores would exceed
:data:`SCORE_BUDGET`), and a block reads only the keys some of its queries attend to (causal attention: up to
its last query), so no ``n x t`` score matrix exists for the whole sequence. A block's mask (:class:`BlockMask`)
and what its kernel plans from the positions and the mask alone (the fused kernel's segments) are the same in
every layer: a forward of one block (a decoding step) plans them once for all layers.

A query that attends to no key (a left pad) gets the mean of all values, as a softmax over equally masked scores
gives (a causal LM's loss reads the last pad, which predicts the first token), unless the model has sinks, whose
logit then takes all the weight. Grouped-query heads are not repeated: the queries of a key/value head are laid
out as rows of one product.

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``n`` queries, ``t`` keys, ``k`` keys of a
block's window, ``d`` head width.
"""

from __future__ import annotations

import torch

from ..keys import RotatedKeys, rotate
from .base import Kernel, RemapCall

__all__ = ["BLOCK_QUERIES", "SCORE_BUDGET", "BlockKernel", "BlockMask", "block_size", "span"]

#: the most queries per block (the masked segments where regions meet grow with it; on the CPU 256 ran as fast as
#: 128 and 512 and faster than 1,024)
BLOCK_QUERIES = 256
#: the most elements of one ``[b, h, block, t]`` score tensor (2**27 float32: 512 MiB)
SCORE_BUDGET = 2**27


class BlockMask:
    """The keys each query of a block ``[start, stop)`` attends to: the mask the attention gets (bool for sdpa,
    0 / dtype-minimum floats for eager), or, without a mask, causal aligned at the end (the last query sees
    every key). Read per range of keys, and per key as "some query" / "every query" of the block."""

    def __init__(self, attention_mask: torch.Tensor | None, start: int, stop: int, n: int, t: int,
                 device: torch.device) -> None:
        self.start, self.stop, self.offset, self.t, self.device = start, stop, t - n, t, device
        self.mask = None
        if attention_mask is not None:
            mask = attention_mask[:, :, start:stop, :t] if attention_mask.shape[2] > 1 else attention_mask[..., :t]
            self.mask = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2

    def pairs(self, lo: int, hi: int) -> torch.Tensor:
        """Bool ``[b|1, 1, rows, hi - lo]``: which of keys ``[lo, hi)`` each query attends to."""
        if self.mask is not None:
            return self.mask[..., lo:hi]
        rows = torch.arange(self.start, self.stop, device=self.device)[:, None] + self.offset
        return (rows >= torch.arange(lo, hi, device=self.device))[None, None]

    def unseeing(self) -> torch.Tensor | None:
        """Bool ``[b|1, 1, rows]``: the queries that attend to no key (padding), or ``None`` when every query
        attends to one."""
        if self.mask is None:
            return None  # causal aligned at the end: query i sees keys up to i + t - n >= 0
        rows = self.stop - self.start
        blind = self.mask.view(torch.uint8).amax(dim=-1) == 0
        blind = blind.expand(blind.shape[0], 1, rows)
        return blind if bool(blind.any()) else None

    def columns(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Bool ``[t]`` twice: the keys some query of the block attends to, and those every query does."""
        if self.mask is None:
            keys = torch.arange(self.t, device=self.device)
            return keys < self.stop + self.offset, keys <= self.start + self.offset
        flat = self.mask.reshape(-1, self.t).view(torch.uint8)  # (uint8 reductions: far faster than bool ones)
        return flat.amax(dim=0).bool(), flat.amin(dim=0).bool()


def block_size(b: int, h: int, t: int) -> int:
    """Queries per block: :data:`BLOCK_QUERIES`, fewer for long keys, at least 16."""
    return max(16, min(BLOCK_QUERIES, SCORE_BUDGET // max(1, b * h * t)))


def span(columns: torch.Tensor) -> tuple[int, int] | None:
    """``(first, last + 1)`` of the true entries of the bool vector ``columns``; ``None`` if there are none."""
    hit = columns.nonzero()
    return None if hit.numel() == 0 else (int(hit[0]), int(hit[-1]) + 1)


class BlockKernel(Kernel):
    """A kernel that computes the attention a block of queries at a time (module docstring)."""

    def plan_block(self, call: RemapCall, mask: BlockMask, start: int, stop: int):
        """What the block ``[start, stop)`` needs beyond its mask, read from the positions and the mask alone (the
        same in every layer); default: nothing."""
        return None

    def block(self, call: RemapCall, keys: RotatedKeys, queries: list[torch.Tensor], start: int, stop: int,
              mask: BlockMask, plan) -> torch.Tensor:
        """The block's attention ``[b, g, rep x rows, dv]`` from its queries rotated per region
        (``queries[region]``: ``[b, h, rows, d]``)."""
        raise NotImplementedError

    def run(self, call: RemapCall) -> torch.Tensor:
        b, h, n, _ = call.query.shape
        g, t, dv = call.value.shape[1], call.key.shape[2], call.value.shape[-1]
        rep = h // g
        step = block_size(b, h, t)
        keys = call.rotated_keys(whole=n > step)
        outputs = []
        for start in range(0, n, step):
            stop = min(n, start + step)
            rows = stop - start
            mask, plan, blind = self._block_plan(call, start, stop, shared=n <= step)
            queries = [rotate(call.query[:, :, start:stop], table, start, stop) for table in call.tables]
            out = self.block(call, keys, queries, start, stop, mask, plan)
            if blind is not None:  # as the softmax of equal scores over all keys gave: the mean of every value
                out = torch.where(blind.reshape(-1, 1, 1, rows, 1), call.value.mean(dim=2)[:, :, None, None],
                                  out.reshape(b, g, rep, rows, dv))
            outputs.append(out.reshape(b, h, rows, dv))
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)

    def _block_plan(self, call: RemapCall, start: int, stop: int, shared: bool) -> tuple:
        """The block's mask, its kernel's plan and, without sinks, the queries that attend to no key
        (:meth:`BlockMask.unseeing`); where the forward is one block (``shared``: a decoding step) kept for every
        layer given the same mask (a longer forward would keep every block's plan alive until its end)."""
        n, t = call.query.shape[2], call.key.shape[2]
        attention_mask, sinks = call.attention_mask, call.sinks is not None
        memo = call.st.step.memo
        memo_key = ("remap_block", self.name, start, stop, n, t, len(call.tables), sinks)
        hit = memo.get(memo_key) if shared else None
        if hit is None or hit[0] is not attention_mask:  # (the id of a freed mask can be reused: compare the object)
            mask = BlockMask(attention_mask, start, stop, n, t, call.query_positions.device)
            plan = self.plan_block(call, mask, start, stop)
            hit = (attention_mask, mask, plan, None if sinks else mask.unseeing())
            if shared:
                memo[memo_key] = hit
        return hit[1:]
