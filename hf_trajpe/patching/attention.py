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

from ..encodings.rotary import rotary_inv_freq
from .key_bias import KEY_BIAS_DTYPES, augmented_qkv
from .plan import ATTENTION_NAMES, self_attention_modules
from .rotation import rotate
from .state import STATE_ATTR, PatchState

__all__ = ["ATTENTION_NAMES", "INDEX_ATTR", "attention_inputs", "register_attention", "bind_attention_modules",
           "score_mask"]

#: attribute (in ``__dict__``) holding a bound self-attention module's number, in model order
INDEX_ATTR = "_hf_trajpe_index"


def _frequencies(st: PatchState, head_dim: int, device) -> tuple[torch.Tensor, float]:
    """``inv_freq`` and ``attention_scaling`` of a rotation inside attention: ``rope_theta``'s, or the context
    extension's (transformers' formulas, computed once per device)."""
    scaling = st.plan.rope_scaling
    if scaling is None:
        return rotary_inv_freq(head_dim, st.plan.rope_theta, device=device), 1.0
    memo = st.__dict__.setdefault("_rope_frequencies", {})
    key = (head_dim, device)
    if key not in memo:
        from .rope_scaling import attention_rope_frequencies

        memo[key] = attention_rope_frequencies(scaling, head_dim, device)
    return memo[key]


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
            inv, scale = _frequencies(st, query.shape[-1], query.device)
            q_cs = scheme.rotary_cos_sin(q_pos, inv, scale, query.dtype)
            k_cs = q_cs if kv == query.shape[2] else scheme.rotary_cos_sin(k_pos, inv, scale, query.dtype)
            step.memo[memo_key] = (q_cs, k_cs)
        (cq, sq), (ck, sk) = step.memo[memo_key]
        # rotation.py: same values as apply_rotary; the backward keeps no unrotated copy of q/k
        query, key = rotate(query, cq, sq), rotate(key, ck, sk)
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


def key_bias_attention(st: PatchState, stock: Callable, module, query: torch.Tensor, key: torch.Tensor,
                       value: torch.Tensor, attention_mask: torch.Tensor | None, kwargs: dict):
    """A causal bias that factors into a query and a key term (causal ALiBi: ``Scheme.key_bias``) as one
    more q/k dimension (key_bias.py): ``stock`` (sdpa) keeps its fused causal kernel and gets no float
    mask. ``None`` where this does not apply: a single query (decoding: a bias row ``[b, h, 1, t]`` is
    cheaper than copying the cached keys and values with a column more), 16-bit dtypes, no factoring, and
    devices other than the CPU (a head width of d + 1 is not aligned for CUDA's fused float32 kernels, which
    would fall back to the math kernel and its full score matrix; there, use the float mask or flex)."""
    key_bias = getattr(st.scheme, "key_bias", None)
    if (key_bias is None or query.shape[2] < 2 or query.dtype not in KEY_BIAS_DTYPES
            or query.device.type != "cpu"):
        return None
    memo = st.step.memo
    memo_key = ("key_bias", query.shape[1])
    if memo_key not in memo:
        memo[memo_key] = key_bias(query.shape[1], st.step.key_positions)
    factors = memo[memo_key]
    if factors is None:
        return None
    scaling = kwargs.get("scaling")
    if scaling is None:  # what sdpa would use for the unaugmented head width
        scaling = query.shape[-1] ** -0.5
    width = value.shape[-1]
    q, k, v = augmented_qkv(query, key, value, factors[0], factors[1], float(scaling))
    out, weights = stock(module, q, k, v, attention_mask, **dict(kwargs, scaling=scaling))
    return out[..., :width].contiguous(), weights  # (models may .view() it; their reshape would copy anyway)


def own_value(st: PatchState, value: torch.Tensor) -> torch.Tensor:
    """``value`` in storage of its own when q/k were rotated here and a backward will run. GPT-2's q, k
    and v are views of one projection output: attention keeps v for the backward, and a view keeps the
    whole output alive, so the unrotated q/k stayed in memory beside their rotated copies (+3% of a
    training step's peak); a copy of v (a third of that output) frees them."""
    if st.scheme.contributes != "rotary" or not (torch.is_grad_enabled() and value.requires_grad):
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


def _eager_with_state(st: PatchState, module, query, key, value, attention_mask, **kwargs):
    if st.scheme.contributes == "score":
        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", False) if is_causal is None else is_causal
        is_causal = bool(is_causal) and query.shape[2] > 1
        mask = score_mask(st, module, query, key, attention_mask, is_causal, kwargs.get("scaling"))
        return st.eager_fn(module, query, key, value, mask, **kwargs)
    query, key, bias = attention_inputs(st, query, key)
    value = own_value(st, value)
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
            out = key_bias_attention(st, stock, module, query, key, value, attention_mask, kwargs)
            if out is not None:
                return out
            is_causal = kwargs.get("is_causal")
            is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
            q_len, kv_len = query.shape[2], key.shape[2]
            is_causal = bool(is_causal) and q_len > 1 and attention_mask is None
            if not (is_causal and kv_len > q_len):  # (else sdpa first crops the keys: leave it to sdpa)
                mask = merged_bias_mask(st, query, key, attention_mask, is_causal)
                return stock(module, query, key, value, mask, **dict(kwargs, is_causal=False))
        query, key, bias = attention_inputs(st, query, key)
        value = own_value(st, value)
        return stock(module, query, key, value, attention_mask, position_bias=bias, **kwargs)

    return attention


def _load_sdpa() -> Callable:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def _load_flex() -> Callable:
    from .flex import flex_attention_forward  # score_mod from positions, bucketed block mask (flex.py)

    return flex_attention_forward


def _load_flex_mask() -> Callable:
    from .flex import flex_mask

    return flex_mask


_sdpa = _with_position_bias(_load_sdpa, merge_mask=True)


def _flex(module, query, key, value, attention_mask, **kwargs):
    return _load_flex()(module, query, key, value, attention_mask, **kwargs)


_REGISTERED = False


def register_attention() -> None:
    """Register hf_trajpe's attention functions with transformers, and the stock mask functions under
    the same names (without a mask function transformers silently drops the causal mask:
    docs/notes.md). Idempotent; ``hf_trajpe.patch`` calls it when a plan needs attention."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    AttentionInterface.register(ATTENTION_NAMES["eager"], _eager)
    AttentionInterface.register(ATTENTION_NAMES["sdpa"], _sdpa)
    AttentionInterface.register(ATTENTION_NAMES["flex_attention"], _flex)
    AttentionMaskInterface.register(ATTENTION_NAMES["eager"], eager_mask)
    AttentionMaskInterface.register(ATTENTION_NAMES["sdpa"], sdpa_mask)
    AttentionMaskInterface.register(ATTENTION_NAMES["flex_attention"], _load_flex_mask())
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
