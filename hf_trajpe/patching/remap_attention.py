"""Attention for the schemes that remap relative positions (``schemes/remap.py``): per region, the scores of
queries and keys rotated at that region's positions; per pair, the score of its region; one softmax over all
keys.

The model's rotary module gives the identity rotation while such a patch is in force (modules.py, or the layer
hooks of a layer selection), so ``query`` and ``key`` arrive unrotated and the KV cache keeps unrotated keys:
the same size as the stock cache, and no key is ever stored at a position that changes. Each forward rotates
every key once per region of the scheme (the scheme may share a key rotation between regions), in every
layer, so a decoding step costs ``regions x`` the key rotations and score products of one stock step.

Queries run in blocks (at most :data:`BLOCK_QUERIES`, fewer when ``b x h x block x t`` scores would exceed
:data:`SCORE_BUDGET`), so no ``n x t`` score matrix exists for the whole sequence; a block holds a few
``[b, h, block, t]`` tensors (the scores, one region's scores, the probabilities). Grouped-query heads are not
repeated: the queries of a key/value head are laid out as rows of one product.

The cos/sin of the remapped positions are built once per forward from the model's frequencies (``inv_freq`` and
``attention_scaling``, those of ``rope_parameters`` when given: the rotary stand-in records them in
``step.memo``) and shared by all layers.

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``n`` queries, ``t`` keys, ``d`` head width,
``r`` rotary width.
"""

from __future__ import annotations

import torch

from ..encodings.rotary import rotary_cos_sin
from .remap_fused import Segment, fused_usable, segment_attention
from .rotation import rotate_part
from .state import ROTARY_FREQUENCIES, PatchState

__all__ = ["BLOCK_QUERIES", "SCORE_BUDGET", "remap_attention"]

#: the most queries per block
BLOCK_QUERIES = 1024
#: the most elements of one ``[b, h, block, t]`` score tensor (2**27 float32: 512 MiB)
SCORE_BUDGET = 2**27


def _tables(st: PatchState, module, kv: int, dtype: torch.dtype, device: torch.device) -> tuple:
    """Per region, the ``(cos, sin)`` ``[b, n, r]`` of the queries and the index of its key table; the key tables
    ``[b, t, r]`` (one per distinct key-position tensor the scheme returns); the query and key positions. Built
    once per forward (and layer type, where the rotary module keeps frequencies per layer type: Gemma 3)."""
    step = st.step
    layer_type = _layer_type(module, step.memo)
    memo_key = ("remap", layer_type, kv, dtype, device)
    if memo_key not in step.memo:
        frequencies = step.memo.get((ROTARY_FREQUENCIES, layer_type))
        if frequencies is None:
            raise RuntimeError(f"{st.plan.scheme}: the model did not call its rotary module in this forward, from "
                               "which the remap takes its frequencies; this model's layers cannot be remapped")
        inv_freq, scaling = frequencies
        queries = step.positions.to(device)
        keys = step.key_positions[:, -kv:].to(device)
        regions = st.scheme.regions(queries, keys)

        def table(positions):
            return rotary_cos_sin(positions, inv_freq=inv_freq.to(device), attention_scaling=scaling, dtype=dtype)

        key_tables, which, seen = [], [], {}
        with step.sharing():  # (for all layers: not part of one layer's checkpoint; checkpointing.py)
            for _, key_positions in regions:
                if id(key_positions) not in seen:
                    seen[id(key_positions)] = len(key_tables)
                    key_tables.append(table(key_positions))
                which.append(seen[id(key_positions)])
            step.memo[memo_key] = ([table(q) for q, _ in regions], which, key_tables, queries, keys)
    return step.memo[memo_key]


def _layer_type(module, memo: dict) -> str | None:
    """The layer type whose frequencies ``module`` rotates with, where the rotary module keeps one set per layer
    type (Gemma 3's ``layer_type``, OLMo 3's ``attention_type``, else ``config.layer_types[layer_idx]``);
    ``None``: one set for every layer."""
    types = getattr(getattr(module, "config", None), "layer_types", None)
    index = getattr(module, "layer_idx", None)
    candidates = (getattr(module, "layer_type", None), getattr(module, "attention_type", None),
                  types[index] if types is not None and isinstance(index, int) and index < len(types) else None)
    return next((c for c in candidates if c is not None and (ROTARY_FREQUENCIES, c) in memo), None)


def _allowed(attention_mask: torch.Tensor | None, start: int, stop: int, n: int, t: int,
             device: torch.device) -> torch.Tensor:
    """Bool ``[b|1, 1, block, t]``: the keys each query of the block attends to (the mask the attention gets:
    bool for sdpa, 0 / dtype-minimum floats for eager), or, without a mask, causal aligned at the end (the
    last query sees every key)."""
    if attention_mask is None:
        rows = torch.arange(start, stop, device=device)[:, None] + (t - n)
        return (rows >= torch.arange(t, device=device))[None, None]
    mask = attention_mask[:, :, start:stop, :t] if attention_mask.shape[2] > 1 else attention_mask[..., :t]
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


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


def _segments(pairs: torch.Tensor, region: int, offset: int) -> list[Segment]:
    """The segments of one region (``pairs``: bool ``[b|1, 1, rows, k]``, its allowed pairs over the block's keys
    from ``offset``): the keys it occurs at, split around its longest-leading run of keys where every pair is
    its own (scored without a mask)."""
    box = _span(pairs.any(dim=(0, 1, 2)))
    if box is None:
        return []
    a, z = box
    every = pairs[..., a:z].all(dim=(0, 1, 2))
    run = _span(every)
    if run is not None:
        p0 = run[0]
        rest = _span(~every[p0:])
        p1 = z - a if rest is None else p0 + rest[0]
        if p1 - p0 >= PURE_RUN:
            parts = [(a, a + p0, True), (a + p0, a + p1, False), (a + p1, z, True)]
            return [Segment(region, offset + lo, offset + hi, pairs[..., lo:hi] if masked else None)
                    for lo, hi, masked in parts if hi > lo]
    return [Segment(region, offset + a, offset + z, pairs[..., a:z])]


class _Keys:
    """The keys rotated at each key table's positions: all of them once per layer where several blocks read
    them, else only the range a segment asks for."""

    def __init__(self, key: torch.Tensor, tables: list, whole: bool) -> None:
        self.key, self.tables, self.whole, self.rotated = key, tables, whole, {}

    def __call__(self, table: int, start: int, stop: int) -> torch.Tensor:
        if self.whole:
            if table not in self.rotated:
                self.rotated[table] = rotate_part(self.key, *self.tables[table])
            return self.rotated[table][:, :, start:stop]
        cos, sin = self.tables[table]
        return rotate_part(self.key[:, :, start:stop], cos[:, start:stop], sin[:, start:stop])


def remap_attention(st: PatchState, module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                    softcap: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """Attention of ``query`` ``[b, h, n, d]`` over ``key``/``value`` ``[b, g, t, d]`` (unrotated) with the
    scheme's remapped positions; returns ``([b, n, h, d], None)`` as transformers' attention functions do (no
    weights: they are never built whole)."""
    b, h, n, d = query.shape
    sinks = kwargs.get("s_aux")  # a learned logit per head in every softmax (gpt-oss), its weight dropped after
    g, t = key.shape[1], key.shape[2]
    rep = h // g
    if scaling is None:
        scaling = getattr(module, "scaling", None) or d ** -0.5
    query_tables, which, key_tables, query_positions, key_positions = _tables(st, module, t, query.dtype,
                                                                                 query.device)
    step = block_size(b, h, t)
    rotated = _Keys(key, key_tables, whole=n > step)
    fused = fused_usable(query, key, value, sinks, dropout=dropout, softcap=softcap)
    outputs = []
    for start in range(0, n, step):
        stop = min(n, start + step)
        rows = stop - start
        allowed = _allowed(attention_mask, start, stop, n, t, query.device)
        # the keys some query of the block attends to: causal attention reads only up to the block's last query
        window = _span(allowed.any(dim=(0, 1, 2))) or (0, t)
        lo, hi = window
        region = st.scheme.region_index(query_positions[:, start:stop, None], key_positions[:, None, lo:hi])[:, None]
        allowed = allowed[..., lo:hi]
        queries = [rotate_part(query[:, :, start:stop], cos[:, start:stop], sin[:, start:stop])
                   for cos, sin in query_tables]
        if fused:
            segments = [seg for index in range(len(query_tables))
                        for seg in _segments((region == index) & allowed, index, lo)]
            out = segment_attention([q.reshape(b, g, rep * rows, d) for q in queries],
                                    lambda index, a, z: rotated(which[index], a, z), value, segments, scaling, rep,
                                    sinks)
        else:
            out = _materialised(queries, [rotated(which[index], lo, hi) for index in range(len(queries))],
                                value[:, :, lo:hi], region, allowed, scaling, softcap, sinks, dropout)
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
    for index, (q, kk) in enumerate(zip(queries, keys)):
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
