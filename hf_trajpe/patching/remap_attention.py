"""Attention for the schemes that remap relative positions (``schemes/remap.py``): per region, the scores of
queries and keys rotated at that region's positions; per pair, the score of its region; one softmax over all
keys.

The model's rotary module gives the identity rotation while such a patch is in force (modules.py, or the layer
hooks of a layer selection), so ``query`` and ``key`` arrive unrotated. A key's rotation depends on its own
position only, so where ``generate()`` (or any caller) passes a cache object, the cache stores each new key
rotated once per key rotation of the scheme, side by side in the last axis (remap_keys.py, cached_keys.py), and
``key`` arrives rotated: a decoding step rotates its query only. Keys of a cache the model made itself arrive
unrotated and are rotated here once per key rotation (:class:`~.remap_keys.RotatedKeys`).

Queries run in blocks (at most :data:`BLOCK_QUERIES`, fewer when ``b x h x block x t`` scores would exceed
:data:`SCORE_BUDGET`), and a block reads only the keys some of its queries attend to (causal attention: up to
its last query), so no ``n x t`` score matrix exists for the whole sequence. Two paths compute a block:

- fused (CPU, no autograd: remap_fused.py): the block's keys are cut into *segments*, per region the keys
  where it occurs for the block, and within them the run of keys where every pair of the block is that
  region's and allowed, which needs no mask (Self-Extend's far keys, DCA's earlier chunks: most of a long
  read). Each segment is one call of torch's fused attention kernel, merged by log-sum-exp: the scores are
  never written, and the only extra work is in the masked segments where regions meet (a band of about
  ``block`` keys per region boundary, plus the causal diagonal), whose pairs of another region the kernel
  scores and masks. Where a region occurs is read from the
  block's smallest and largest query position, because a region never decreases with the query position;
- materialised (autograd, dropout, soft-capped logits, other devices): the block's ``[b, h, block, k]`` scores
  of every region over its key window, per pair its region's (``torch.where``), masked, one softmax in float32
  at least, times the values.

On both paths a query that attends to no key (a left pad) gets the mean of all values, as a softmax over
equally masked scores gives (a causal LM's loss reads the last pad, which predicts the first token), unless the
model has sinks, whose logit then takes all the weight. Grouped-query heads are not repeated: the queries of a
key/value head are laid out as rows of one product. A forward of one block (a decoding step) plans its segments
once for all layers. The cos/sin of the remapped positions are built once per forward and shared by all layers
(remap_keys.py).

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``n`` queries, ``t`` keys, ``k`` keys of a
block's window, ``d`` head width, ``r`` rotary width.
"""

from __future__ import annotations

import torch

from .remap_fused import Segment, fused_usable, segment_attention
from .remap_keys import RotatedKeys, holds_rotated_keys, layer_type_names, query_tables, rotate
from .state import PatchState

__all__ = ["BLOCK_QUERIES", "PURE_RUN", "SCORE_BUDGET", "remap_attention"]

#: the most queries per block (the masked segments where regions meet grow with it; on the CPU 256 ran as fast as
#: 128 and 512 and faster than 1,024)
BLOCK_QUERIES = 256
#: the most elements of one ``[b, h, block, t]`` score tensor (2**27 float32: 512 MiB)
SCORE_BUDGET = 2**27


class _BlockMask:
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


def _span(columns: torch.Tensor) -> tuple[int, int] | None:
    """``(first, last + 1)`` of the true entries of the bool vector ``columns``; ``None`` if there are none."""
    hit = columns.nonzero()
    return None if hit.numel() == 0 else (int(hit[0]), int(hit[-1]) + 1)


#: the fewest keys of a region in which every pair is that region's and allowed, scored as a segment of its own
#: (without a mask) rather than inside the masked rest
PURE_RUN = 64


def _segments(scheme, queries: torch.Tensor, keys: torch.Tensor, mask: _BlockMask, count: int) -> list[Segment]:
    """The segments of a block: per region, the keys where some pair of the block is in it and allowed, split
    around its first run of at least :data:`PURE_RUN` keys in which every pair is (scored without a mask).

    Which regions a key meets is read from the block's smallest and largest query position alone: a scheme's
    region does not decrease with the query position (``RemapScheme.region_index``), so the regions of a key's
    pairs lie between those two. Only the masked ranges get the region of every pair. ``queries``: the block's
    positions ``[b, rows]``; ``keys``: ``[b, t]``."""
    some, every = mask.columns()
    window = _span(some)
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
        box = _span(some & (least <= region) & (most >= region))
        if box is None:
            continue
        a, z = box
        run = _span((every & (least == region) & (most == region))[a:z])
        if run is not None:
            p0 = run[0]
            rest = _span(~(every & (least == region) & (most == region))[a + p0:z])
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


def _block_plan(st: PatchState, attention_mask: torch.Tensor | None, query_positions: torch.Tensor,
                key_positions: torch.Tensor, start: int, stop: int, n: int, t: int, count: int, fused: bool,
                sinks: bool, shared: bool) -> tuple[_BlockMask, list[Segment] | None, torch.Tensor | None]:
    """What the block ``[start, stop)`` reads from the positions and the mask alone: its mask, its segments (fused
    path) and, without ``sinks``, the queries that attend to no key (:meth:`_BlockMask.unseeing`). The same in
    every layer, so where the forward is one block (``shared``: a decoding step) it is planned once per forward
    (for the layers given the same mask; a longer forward would keep every block's masked segments alive until
    its end)."""
    memo_key = ("remap_block", start, stop, n, t, count, fused, sinks)
    hit = st.step.memo.get(memo_key) if shared else None
    if hit is None or hit[0] is not attention_mask:  # (the id of a freed mask can be reused: compare the object)
        mask = _BlockMask(attention_mask, start, stop, n, t, query_positions.device)
        segments = _segments(st.scheme, query_positions[:, start:stop], key_positions, mask, count) if fused else None
        hit = (attention_mask, mask, segments, None if sinks else mask.unseeing())
        if shared:
            st.step.memo[memo_key] = hit
    return hit[1:]


def remap_attention(st: PatchState, module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                    softcap: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """Attention of ``query`` ``[b, h, n, d]`` over ``value`` ``[b, g, t, d]`` and ``key``: ``[b, g, t, d]``
    unrotated, or ``[b, g, t, R x d]`` rotated for each of the scheme's ``R`` key rotations where a prepared KV
    cache returned it (remap_keys.py), with the scheme's remapped positions; returns ``([b, n, h, d], None)`` as
    transformers' attention functions do (no weights: they are never built whole)."""
    b, h, n, d = query.shape
    if attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[1] > 1:
        raise NotImplementedError(
            f"{type(module).__name__} hands its attention a mask per head ({tuple(attention_mask.shape)}: values "
            "the model computes for each head, as Doge's dynamic mask attention does); the remap attention reads "
            "masks as allowed / masked pairs shared by all heads and would drop those values. Use a frequency "
            "scaling (rope_parameters) on this model instead of a remap")
    sinks = kwargs.get("s_aux")  # a learned logit per head in every softmax (gpt-oss), its weight dropped after
    g, t = value.shape[1], key.shape[2]
    rep = h // g
    if scaling is None:
        scaling = getattr(module, "scaling", None) or d ** -0.5
    names = layer_type_names(module)
    tables, which, query_positions = query_tables(st, names, query.dtype, query.device)
    key_positions = st.step.key_positions[:, -t:].to(query.device)
    step = block_size(b, h, t)
    rotated = RotatedKeys(st, names, key, d, max(which) + 1, holds_rotated_keys(st, module), whole=n > step)
    fused = fused_usable(query, key, value, sinks, dropout=dropout, softcap=softcap)
    outputs = []
    for start in range(0, n, step):
        stop = min(n, start + step)
        rows = stop - start
        mask, segments, blind = _block_plan(st, attention_mask, query_positions, key_positions, start, stop, n, t,
                                            len(tables), fused, sinks is not None, shared=n <= step)
        queries = [rotate(query[:, :, start:stop], table, start, stop) for table in tables]
        if fused:
            out = segment_attention([q.reshape(b, g, rep * rows, d) for q in queries],
                                    lambda index, a, z: rotated(which[index], a, z), value, segments, scaling, rep,
                                    sinks)
        else:
            # the keys some query of the block attends to: causal attention reads only up to the last query
            lo, hi = _span(mask.columns()[0]) or (0, t)
            region = st.scheme.region_index(query_positions[:, start:stop, None],
                                            key_positions[:, None, lo:hi])[:, None]
            out = _materialised(queries, [rotated(which[index], lo, hi) for index in range(len(queries))],
                                value[:, :, lo:hi], region, mask.pairs(lo, hi), scaling, softcap, sinks, dropout)
        if blind is not None:  # as the softmax of equal scores over all keys gave: the mean of every value
            out = torch.where(blind.reshape(-1, 1, 1, rows, 1), value.mean(dim=2)[:, :, None, None],
                              out.reshape(b, g, rep, rows, value.shape[-1]))
        outputs.append(out.reshape(b, h, rows, value.shape[-1]))
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)
    return out.transpose(1, 2).contiguous(), None


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
