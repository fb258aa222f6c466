"""Attention functions registered with transformers' ``AttentionInterface``: they apply what a scheme
puts inside attention (a rotation of q/k on models without a rotary module, a bias on the scores,
a per-layer score term computed from q and k) and then call the stock eager, sdpa or flex function.

:func:`register_attention` is the one registration step: idempotent, called by ``hf_trajpe.patch``
when a plan needs attention, and public for users who load a model with one of our implementation
names (``hf_trajpe_eager``, ``hf_trajpe_sdpa``, ``hf_trajpe_flex``). Modules that were not patched
go straight to the stock function.

Shape legend: ``b`` batch, ``h`` heads, ``n`` new tokens (queries), ``t`` keys, ``d`` head width.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from torch import nn

from ..encodings.rotary import apply_rotary, rotary_inv_freq
from .plan import ATTENTION_NAMES, self_attention_modules
from .state import STATE_ATTR, PatchState

__all__ = ["ATTENTION_NAMES", "INDEX_ATTR", "attention_inputs", "register_attention", "bind_attention_modules",
           "score_mask"]

#: attribute (in ``__dict__``) holding a bound self-attention module's number, in model order
INDEX_ATTR = "_hf_trajpe_index"


def attention_inputs(st: PatchState, query: torch.Tensor, key: torch.Tensor):
    """``query``/``key`` ``[b, h, n|t, d]`` rotated (rotary schemes on models without a rotary module)
    and the score bias ``[b, h, n, t]`` (bias schemes) or ``None``; both built once per forward."""
    step = st.step
    kv = key.shape[2]
    k_pos = step.key_positions[:, -kv:]
    q_pos = step.positions
    scheme = st.scheme
    if scheme.contributes == "rotary":
        memo_key = ("rope", query.shape[-1], query.dtype, kv)
        if memo_key not in step.memo:
            inv = rotary_inv_freq(query.shape[-1], st.plan.rope_theta, device=query.device)
            step.memo[memo_key] = (
                scheme.rotary_cos_sin(q_pos, inv, 1.0, query.dtype),
                scheme.rotary_cos_sin(k_pos, inv, 1.0, query.dtype),
            )
        (cq, sq), (ck, sk) = step.memo[memo_key]
        if kv == query.shape[2]:
            query, key = apply_rotary(query, key, cq, sq)
        else:
            query = apply_rotary(query, query, cq, sq)[0]
            key = apply_rotary(key, key, ck, sk)[0]
    bias = None
    if scheme.contributes == "bias":
        memo_key = ("bias", query.shape[1], query.dtype, kv)
        if memo_key not in step.memo:
            step.memo[memo_key] = scheme.attention_bias(query.shape[1], q_pos, k_pos, query.dtype)
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
        hit = (attention_mask, create_position_bias_mask(bias, attention_mask, is_causal, query, key))
        memo[memo_key] = hit
        memo.pop(("bias", query.shape[1], query.dtype, key.shape[2]), None)
    return hit[1]


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


def _eager_with_state(st: PatchState, module, query, key, value, attention_mask, **kwargs):
    if st.scheme.contributes == "score":
        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", False) if is_causal is None else is_causal
        is_causal = bool(is_causal) and query.shape[2] > 1
        mask = score_mask(st, module, query, key, attention_mask, is_causal, kwargs.get("scaling"))
        return st.eager_fn(module, query, key, value, mask, **kwargs)
    query, key, bias = attention_inputs(st, query, key)
    if bias is not None:
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", False) if is_causal is None else is_causal
        is_causal = bool(is_causal) and query.shape[2] > 1
        attention_mask = create_position_bias_mask(bias, attention_mask, is_causal, query, key)
    return st.eager_fn(module, query, key, value, attention_mask, **kwargs)


def _eager(module, query, key, value, attention_mask, **kwargs):
    st: PatchState | None = module.__dict__.get(STATE_ATTR)
    if st is not None:
        return _eager_with_state(st, module, query, key, value, attention_mask, **kwargs)
    fn = importlib.import_module(type(module).__module__).eager_attention_forward
    return fn(module, query, key, value, attention_mask, **kwargs)


def _with_position_bias(load_stock: Callable[[], Callable], merge_mask: bool = False) -> Callable:
    """An attention function that rotates q/k and passes the bias to a stock one (sdpa, flex).
    ``merge_mask`` (sdpa): the bias goes in as a float attention mask shared by all layers
    (:func:`merged_bias_mask`), decided as sdpa itself would; otherwise as ``position_bias``, which
    sdpa would merge with the mask again in every layer. A score scheme (sdpa only) gets its own
    float mask per layer (:func:`score_mask`)."""

    def attention(module, query, key, value, attention_mask, **kwargs):
        stock = load_stock()
        st: PatchState | None = module.__dict__.get(STATE_ATTR)
        if st is None:
            return stock(module, query, key, value, attention_mask, **kwargs)
        if st.scheme.contributes == "score":
            if not merge_mask:
                raise NotImplementedError(f"{st.plan.scheme} runs with attention implementations eager and sdpa "
                                          "only, not flex_attention")
            is_causal = kwargs.get("is_causal")
            is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
            is_causal = bool(is_causal) and query.shape[2] > 1 and attention_mask is None
            mask = score_mask(st, module, query, key, attention_mask, is_causal, kwargs.get("scaling"))
            return stock(module, query, key, value, mask, **dict(kwargs, is_causal=False))
        if merge_mask and st.scheme.contributes == "bias":  # (a bias scheme never rotates q/k)
            is_causal = kwargs.get("is_causal")
            is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
            q_len, kv_len = query.shape[2], key.shape[2]
            is_causal = bool(is_causal) and q_len > 1 and attention_mask is None
            if not (is_causal and kv_len > q_len):  # (else sdpa first crops the keys: leave it to sdpa)
                mask = merged_bias_mask(st, query, key, attention_mask, is_causal)
                return stock(module, query, key, value, mask, **dict(kwargs, is_causal=False))
        query, key, bias = attention_inputs(st, query, key)
        return stock(module, query, key, value, attention_mask, position_bias=bias, **kwargs)

    return attention


def _load_sdpa() -> Callable:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def _load_flex() -> Callable:
    from transformers.integrations.flex_attention import flex_attention_forward

    return flex_attention_forward


_sdpa = _with_position_bias(_load_sdpa, merge_mask=True)
_flex = _with_position_bias(_load_flex)
_REGISTERED = False


def register_attention() -> None:
    """Register hf_trajpe's attention functions with transformers, and the stock mask functions under
    the same names (without a mask function transformers silently drops the causal mask:
    docs/notes.md). Idempotent; ``hf_trajpe.patch`` calls it when a plan needs attention."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, flex_attention_mask, sdpa_mask

    AttentionInterface.register(ATTENTION_NAMES["eager"], _eager)
    AttentionInterface.register(ATTENTION_NAMES["sdpa"], _sdpa)
    AttentionInterface.register(ATTENTION_NAMES["flex_attention"], _flex)
    AttentionMaskInterface.register(ATTENTION_NAMES["eager"], eager_mask)
    AttentionMaskInterface.register(ATTENTION_NAMES["sdpa"], sdpa_mask)
    AttentionMaskInterface.register(ATTENTION_NAMES["flex_attention"], flex_attention_mask)
    _REGISTERED = True


def bind_attention_modules(base: nn.Module, self_attention: tuple[str, ...], state: PatchState | None) -> int:
    """Point every self-attention module (class names ``self_attention``, not cross-attention) at
    ``state`` and number them in model order (``None``: detach them); returns how many."""
    from .state import bind_state

    modules = self_attention_modules(base, self_attention)
    for index, m in enumerate(modules):
        bind_state(m, state)
        if state is None:
            m.__dict__.pop(INDEX_ATTR, None)
        else:
            m.__dict__[INDEX_ATTR] = index
    return len(modules)
