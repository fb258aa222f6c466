"""What the attention functions compute from a patch's state before the stock kernel runs: the q/k of a
rotary scheme (rotated here on models without a rotary module), the position-bias mask merged with the
attention mask, and a score scheme's per-layer logits as one float mask. Shared by the eager/sdpa functions
(:mod:`.attention`) and the flex function (:mod:`.flex`), which otherwise need nothing from each other.

Shape legend: ``b`` batch, ``h`` heads, ``n`` new tokens (queries), ``t`` keys, ``d`` head width.
"""

from __future__ import annotations

import torch

from .cached_keys import is_prepared
from .rotary_tables import key_tables, query_tables
from .rotation import rotate_part
from .state import PatchState

__all__ = ["INDEX_ATTR", "allowed_keys", "attention_inputs", "merged_bias_mask", "own_value", "rotate_part",
           "score_mask"]

#: attribute (in ``__dict__``) holding a bound self-attention module's number, in model order
INDEX_ATTR = "_hf_trajpe_index"


def attention_inputs(st: PatchState, query: torch.Tensor, key: torch.Tensor):
    """``query``/``key`` ``[b, h, n|t, d]`` rotated (rotary schemes on models without a rotary module)
    and the score bias ``[b, h, n, t]`` (bias schemes) or ``None``; both built once per forward. Keys a
    prepared KV cache returned are rotated already (cached_keys.py): only the query is rotated then."""
    step = st.step
    kv = key.shape[2]
    scheme = st.scheme
    if st.contributes == "rotary":
        # rotation.py: same values as apply_rotary; the backward keeps no unrotated copy of q/k
        width = st.plan.rotary_width or query.shape[-1]  # rotary_fraction: the first ``width`` dimensions
        query = rotate_part(query, *query_tables(st, width, query.dtype, query.device))
        if not is_prepared(step, key):
            key = rotate_part(key, *key_tables(st, kv, width, query.dtype, query.device))
    bias = None
    if st.contributes == "bias":
        memo_key = ("bias", query.shape[1], query.dtype, kv)
        if memo_key not in step.memo:
            with step.sharing():
                step.memo[memo_key] = scheme.attention_bias(query.shape[1], step.positions,
                                                            step.key_positions[:, -kv:], query.dtype)
        bias = step.memo[memo_key]
    return query, key, bias


def merged_bias_mask(st: PatchState, query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None,
                     is_causal: bool) -> torch.Tensor:
    """The score bias merged with the attention mask into one float mask ``[b, h, n, t]``, built once
    per forward and shared by all layers; the separate bias is then dropped. Built per layer (as
    ``position_bias``), it costs a pass over ``[b, h, n, t]`` each time and, in training, every layer
    keeps its own copy for the backward (docs/benchmarks.md)."""
    from transformers.integrations.sdpa_attention import create_position_bias_mask

    memo = st.step.memo
    memo_key = ("bias_mask", id(attention_mask), is_causal, query.shape[1], query.dtype, query.shape[2],
                key.shape[2])
    hit = memo.get(memo_key)
    if hit is None or hit[0] is not attention_mask:  # the id of a freed mask can be reused
        _, _, bias = attention_inputs(st, query, key)
        with st.step.sharing():
            hit = (attention_mask, create_position_bias_mask(bias, attention_mask, is_causal, query, key))
        memo[memo_key] = hit
        memo.pop(("bias", query.shape[1], query.dtype, key.shape[2]), None)
    return hit[1]


def own_value(st: PatchState, value: torch.Tensor) -> torch.Tensor:
    """``value`` in storage of its own when q/k were rotated here and a backward will run. GPT-2's q, k
    and v are views of one projection output: attention keeps v for the backward, and a view keeps the
    whole output alive, so the unrotated q/k stayed in memory beside their rotated copies (+3% of a
    training step's peak); a copy of v (a third of that output) frees them."""
    if st.contributes != "rotary" or not (torch.is_grad_enabled() and value.requires_grad):
        return value
    return value.contiguous()


def allowed_keys(attention_mask: torch.Tensor | None, is_causal: bool, query: torch.Tensor,
                 key: torch.Tensor) -> torch.Tensor | None:
    """Bool ``[b|1, 1, n, t]``: the keys each query attends to, read from the mask the attention gets
    (bool for sdpa, 0 / dtype-minimum floats for eager), or the causal pattern sdpa would apply
    without a mask (``None``: every key)."""
    if attention_mask is None:
        if not is_causal:
            return None
        device = key.device
        causal = torch.arange(query.shape[2], device=device)[:, None] >= torch.arange(key.shape[2], device=device)
        return causal[None, None]
    if attention_mask.dtype == torch.bool:
        return attention_mask
    return attention_mask > torch.finfo(attention_mask.dtype).min / 2


def score_mask(st: PatchState, module, query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None,
               is_causal: bool, scaling: float | None) -> torch.Tensor | None:
    """A score scheme's logits for this module (``Scheme.score_bias``) with the masked keys set to the
    dtype's minimum: one float mask ``[b, h, n, t]`` that replaces the attention mask. Per layer: the
    term depends on the layer's q and k."""
    from transformers.integrations.sdpa_attention import repeat_kv

    if scaling is None:
        scaling = getattr(module, "scaling", None) or query.shape[-1] ** -0.5
    keys = repeat_kv(key, query.shape[1] // key.shape[1])  # GQA: the key of each query head
    allowed = allowed_keys(attention_mask, is_causal, query, key)
    bias = st.scheme.score_bias(module.__dict__[INDEX_ATTR], query, keys, float(scaling), allowed)
    return bias if allowed is None else bias.masked_fill(~allowed, torch.finfo(bias.dtype).min)
