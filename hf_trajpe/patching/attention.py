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

import functools
import importlib
from collections.abc import Callable

import torch
from torch import nn

from .attention_inputs import INDEX_ATTR, attention_inputs, merged_bias_mask, own_value, score_mask
from .key_bias import KEY_BIAS_DTYPES, augmented_qkv
from .layer_frequencies import layer_type_names
from .plan import ATTENTION_NAMES, self_attention_modules
from .state import STATE_ATTR, PatchState
from .subnormals import narrow, scale, subnormal_scales

#: the attention inputs and the score mask (attention_inputs.py) are named here for the modules that bind them
__all__ = ["ATTENTION_NAMES", "INDEX_ATTR", "attention_inputs", "register_attention", "bind_attention_modules",
           "score_mask"]

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
        with st.step.sharing():
            memo[memo_key] = key_bias(query.shape[1], st.step.key_positions)
    factors = memo[memo_key]
    if factors is None:
        return None
    scaling = kwargs.get("scaling")
    if scaling is None:  # what sdpa would use for the unaugmented head width
        scaling = query.shape[-1] ** -0.5
    width = value.shape[-1]
    value_scale, grad_scale = subnormal_scales(query)  # exact powers of two: no subnormals (subnormals.py)
    q, k, v = augmented_qkv(query, key, value, factors[0], factors[1], float(scaling), value_scale, grad_scale)
    out, weights = stock(module, q, k, v, attention_mask, **dict(kwargs, scaling=scaling))
    # contiguous (models may .view() it; their reshape would copy anyway), scaled back
    return narrow(out, width, 1.0 / value_scale, grad_scale / value_scale), weights


def _scaled(stock: Callable, module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            mask: torch.Tensor | None, kwargs: dict):
    """``stock`` attention with values and gradients scaled by exact powers of two, so that float32 on
    the CPU computes no subnormal products of tiny ALiBi weights (subnormals.py); bit-identical otherwise."""
    value_scale, grad_scale = subnormal_scales(query)
    if value_scale == 1.0:
        return stock(module, query, key, value, mask, **kwargs)
    inverse = 1.0 / grad_scale
    query, key = scale(query, 1.0, inverse), scale(key, 1.0, inverse)
    value = scale(value, value_scale, value_scale * inverse)
    if mask is not None and mask.requires_grad:
        mask = scale(mask, 1.0, inverse)
    out, weights = stock(module, query, key, value, mask, **kwargs)
    return scale(out, 1.0 / value_scale, grad_scale / value_scale), weights


def _one_query_bias(st: PatchState, stock: Callable, module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attention_mask: torch.Tensor | None, kwargs: dict):
    """A bias scheme's sdpa attention for one query per row (a decoding step, once per layer and generated token):
    the bias row ``[b, h, 1, t]`` merged with the mask once per forward, no causal flag (one query sees every
    key), no subnormal scaling (``subnormal_scales`` scales only several queries), so the general branch reduced to
    the calls it makes for one query: the same result."""
    mask = merged_bias_mask(st, query, key, attention_mask, False)
    return stock(module, query, key, value, mask, **dict(kwargs, is_causal=False))


def _attends(st: PatchState, module) -> bool:
    """Whether the scheme computes ``module``'s attention itself (``Scheme.attend``: a remap, on a layer that
    rotates)."""
    return st.computes_attention and st.scheme.attends(module)


def _eager_with_state(st: PatchState, module, query, key, value, attention_mask, **kwargs):
    if _attends(st, module):
        return st.scheme.attend(st, module, query, key, value, attention_mask, **kwargs)
    if st.contributes == "score":
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
        contributes = st.contributes
        if merge_mask and contributes == "bias" and query.shape[2] == 1:
            # a bias scheme's decoding step (a bias scheme never rotates q/k), once per layer and generated token:
            # what the lines below do for one query, in fewer calls
            return _one_query_bias(st, stock, module, query, key, value, attention_mask, kwargs)
        if _attends(st, module):
            if not merge_mask:
                raise NotImplementedError(f"{st.plan.scheme} runs with attention implementations eager and sdpa "
                                          "only, not flex_attention")
            return st.scheme.attend(st, module, query, key, value, attention_mask, **kwargs)
        if contributes == "score":
            if not merge_mask:
                raise NotImplementedError(f"{st.plan.scheme} runs with attention implementations eager and sdpa "
                                          "only, not flex_attention")
            is_causal = kwargs.get("is_causal")
            is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
            is_causal = bool(is_causal) and query.shape[2] > 1 and attention_mask is None
            mask = score_mask(st, module, query, key, attention_mask, is_causal, kwargs.get("scaling"))
            return stock(module, query, key, value, mask, **dict(kwargs, is_causal=False))
        if merge_mask and contributes == "bias":
            out = key_bias_attention(st, stock, module, query, key, value, attention_mask, kwargs)
            if out is not None:
                return out
            is_causal = kwargs.get("is_causal")
            is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
            q_len, kv_len = query.shape[2], key.shape[2]
            is_causal = bool(is_causal) and q_len > 1 and attention_mask is None
            if not (is_causal and kv_len > q_len):  # (else sdpa first crops the keys: leave it to sdpa)
                mask = merged_bias_mask(st, query, key, attention_mask, is_causal)
                return _scaled(stock, module, query, key, value, mask, dict(kwargs, is_causal=False))
        query, key, bias = attention_inputs(st, query, key)
        value = own_value(st, value)
        return stock(module, query, key, value, attention_mask, position_bias=bias, **kwargs)

    return attention


@functools.cache
def _sdpa_module():
    return importlib.import_module("transformers.integrations.sdpa_attention")


def _load_sdpa() -> Callable:
    """transformers' sdpa function, read from its module at each call (one attribute, not an import statement: it
    runs once per layer and generated token)."""
    return _sdpa_module().sdpa_attention_forward


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
    if state is not None:
        state.cache_layers = cache_layers(state, modules)
    return len(modules)


def cache_layers(state: PatchState, modules: list[nn.Module]) -> dict[int, tuple[str | None, ...]]:
    """The KV-cache layer numbers (``layer_idx``) of the ``modules`` whose keys the cache should hold rotated
    (cached_keys.py: RoPE inside attention, or a scheme that computes attention itself, on the layers it runs on),
    each with the names of its layer type (for the frequencies a remap rotates with); none unless every module is
    numbered."""
    if state.scheme.contributes == "rotary":
        def rotates(m):
            return state.plan.uses_attention
    elif state.computes_attention:
        def rotates(m):
            return _attends(state, m)
    else:
        return {}
    numbers = [getattr(m, "layer_idx", None) for m in modules]
    if not numbers or any(not isinstance(i, int) for i in numbers) or len(set(numbers)) != len(numbers):
        return {}
    return {m.layer_idx: layer_type_names(m) for m in modules if rotates(m)}
