"""The remap's attention as one FlexAttention call per region, each over a block-sparse mask of that region's
pairs, merged exactly by their log-sum-exp: the GPU path.

A region's pairs (``RemapScheme.region_index``) are a block-sparse set: Self-Extend's and ReRoPE's neighbour band
and the far triangle below it, DCA's chunk diagonal, the chunk before it and everything earlier, STRING's band
and the rest. Per region, ``create_block_mask`` turns "allowed and in this region" into a block mask, and
``flex_attention`` reads only the blocks that hold such pairs (with ``return_aux=AuxRequest(lse=True)``), so the
regions together cost about one causal attention plus the blocks where regions meet. The queries are rotated at
the region's positions and the keys at its key rotation (the KV cache holds them rotated already); the partial
softmaxes are merged as the fused CPU kernel merges its segments (:func:`~.base.merge_by_lse`). Grouped-query
heads are read without repeating keys and values (``enable_gqa``); soft-capped logits are a ``score_mod``; a
learned sink logit per head is one more term of the merged log-sum-exp.

The block masks depend on the positions and the attention mask only, so a forward builds them once for all its
layers. On CUDA, ``flex_attention`` is compiled once and ``create_block_mask`` too for a prefill; torch's automatic
dynamic shapes recompile once when a length first changes and then treat it as symbolic, so not once per length.
On the CPU FlexAttention runs unfused (eager): exact and used by the tests, but slower than ``cpu_fused``, so
``kernel="auto"`` takes it on CUDA only. torch has no FlexAttention backward on the CPU: training through it needs
a GPU. (The CUDA paths are written from torch's documentation and source; their first run is ``make
bench-gpu-remap``.)

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``n`` queries, ``t`` keys, ``d`` head width.
"""

from __future__ import annotations

import functools
import warnings

import torch

from .base import Kernel, RemapCall, merge_by_lse

__all__ = ["BLOCK_SIZE", "COMPILE_MASK_PAIRS", "Flex", "flex_available"]

#: the block of the block masks (FlexAttention's default)
BLOCK_SIZE = 128
#: from this many query-key pairs on, CUDA builds a block mask with the compiled builder, which reads the pairs
#: block by block; below it (decoding steps: one query row) the eager builder evaluates every pair at once, which
#: is cheap there and compiles nothing per length
COMPILE_MASK_PAIRS = 2**24


@functools.cache
def _api():
    """``(flex_attention, create_block_mask, AuxRequest)``, or ``None`` where this torch lacks them."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention
    except ImportError:
        return None
    return flex_attention, create_block_mask, AuxRequest


def flex_available() -> bool:
    """Whether this torch offers FlexAttention with its log-sum-exp (``AuxRequest``)."""
    return _api() is not None


@functools.cache
def _compiled_attention():
    """``flex_attention`` compiled once; torch's automatic dynamic shapes make a length that changes symbolic after
    the first recompile, while the batch stays static where it does not change (which flex's decoding kernel
    needs)."""
    return torch.compile(_api()[0])


@functools.cache
def _compiled_block_mask():
    """``create_block_mask`` compiled (torch's advice in place of its deprecated ``_compile=True``): it then reads
    the pairs block by block instead of evaluating every pair at once."""
    return torch.compile(_api()[1])


def _attention(device: torch.device):
    """``flex_attention`` compiled on CUDA (fused), eager elsewhere (the unfused reference, warning silenced)."""
    if device.type == "cuda":
        return _compiled_attention()

    def eager(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return _api()[0](*args, **kwargs)

    return eager


def _allowed(call: RemapCall) -> torch.Tensor | None:
    """The mask as bool ``[b, 1, n, t]`` (a view where it broadcasts), or ``None``: causal aligned at the end."""
    mask = call.attention_mask
    if mask is None:
        return None
    b, n, t = call.query.shape[0], call.query.shape[2], call.key.shape[2]
    mask = mask[:, :, :n, :t] if mask.shape[2] > 1 else mask[..., :t]
    mask = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return mask.expand(b, 1, n, t)


def _block_masks(call: RemapCall) -> tuple[list, torch.Tensor | None]:
    """Per region the block mask of its allowed pairs, and the queries that attend to no key ``[b, 1, n]`` (or
    ``None``); built once per forward for the layers given the same mask."""
    b, n, t = call.query.shape[0], call.query.shape[2], call.key.shape[2]
    memo = call.st.step.memo
    # (per mask object: layers of two kinds, sliding and full, alternate; the id of a freed mask can be reused, so
    # the object itself is compared too)
    memo_key = ("remap_flex", n, t, len(call.tables), call.query.device, id(call.attention_mask))
    hit = memo.get(memo_key)
    if hit is not None and hit[0] is call.attention_mask:
        return hit[1], hit[2]
    scheme, allowed = call.st.scheme, _allowed(call)
    queries, keys = call.query_positions.to(call.query.device), call.key_positions.to(call.query.device)
    offset = t - n
    device = call.query.device

    def region_mask(region: int):
        def mask_mod(bi, hi, qi, ki):
            inside = scheme.region_index(queries[bi, qi], keys[bi, ki]) == region
            if allowed is None:
                return inside & (ki <= qi + offset)
            return inside & allowed[bi, 0, qi, ki]

        return mask_mod

    compiled = device.type == "cuda" and n * t > COMPILE_MASK_PAIRS  # (a prefill; a decoding step reads t pairs)
    create = _compiled_block_mask() if compiled else _api()[1]
    masks = [create(region_mask(r), b, None, n, t, device=device, BLOCK_SIZE=BLOCK_SIZE)
             for r in range(len(call.tables))]
    blind = None
    if allowed is not None and call.sinks is None:
        blind = ~allowed.any(dim=-1)
        blind = blind if bool(blind.any()) else None
    memo[memo_key] = (call.attention_mask, masks, blind)
    return masks, blind


class Flex(Kernel):
    """FlexAttention per region (module docstring): the fast path on CUDA."""

    name = "flex"

    def refusal(self, call: RemapCall) -> str | None:
        if _api() is None:
            return f"torch {torch.__version__} has no FlexAttention with its log-sum-exp (AuxRequest)"
        device = call.query.device.type
        if device not in ("cpu", "cuda"):
            return f"FlexAttention runs on the CPU and CUDA, and this attention runs on {device}"
        if call.needs_grad and device == "cpu":
            return ("torch has no FlexAttention backward on the CPU, and autograd runs through this attention; "
                    "train on a GPU, or with kernel='materialised'")
        if call.dropout:
            return "FlexAttention has no attention dropout (the model is in training mode with attention dropout)"
        if call.query.shape[-1] != call.value.shape[-1]:
            return "it needs queries and values of one width"
        if device == "cuda" and call.query.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return f"FlexAttention on CUDA takes float32, bfloat16 or float16, not {call.query.dtype}"
        return None

    def passed_over(self, call: RemapCall) -> str | None:
        if call.query.device.type != "cuda":
            return "off CUDA FlexAttention runs unfused, slower than the CPU kernels"
        return None

    def run(self, call: RemapCall) -> torch.Tensor:
        from ..keys import rotate

        b, h, n, d = call.query.shape
        g, dv = call.value.shape[1], call.value.shape[-1]
        rep = h // g
        masks, blind = _block_masks(call)
        # a decoding step reads a prepared cache's copies in place, uncopied; keys the model cached unrotated are
        # rotated once per key rotation, not once per region that reads them
        keys = call.rotated_keys(whole=n > 1 or not call.prepared)
        attention, aux = _attention(call.query.device), _api()[2]
        softcap = call.softcap
        score_mod = None if softcap is None else (lambda score, bi, hi, qi, ki: torch.tanh(score / softcap) * softcap)
        outputs, lses = [], []
        for region, (table, block_mask) in enumerate(zip(call.tables, masks, strict=True)):
            query = rotate(call.query, table, 0, n)
            key = keys(call.which[region], 0, keys.key.shape[2])
            out, extra = attention(query, key, call.value, score_mod=score_mod, block_mask=block_mask,
                                   scale=call.scaling, enable_gqa=rep > 1, return_aux=aux(lse=True))
            outputs.append(out.reshape(b, g, rep * n, dv))
            lses.append(extra.lse.reshape(b, g, rep * n))
        out = merge_by_lse(outputs, lses, call.value.dtype, call.sinks, rep)
        if blind is not None:  # as the softmax of equal scores over all keys gave: the mean of every value
            out = torch.where(blind.reshape(b, 1, 1, n, 1), call.value.mean(dim=2)[:, :, None, None],
                              out.reshape(b, g, rep, n, dv))
        return out.reshape(b, h, n, dv)
