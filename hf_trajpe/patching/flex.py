"""FlexAttention for patched models (``attn_implementation="flex_attention"``; docs/patching.md, FlexAttention).

ALiBi, and trajectory on ALiBi, enter flex as a ``score_mod`` that reads per-token positions: the
queries' ``[b, n]``, the keys' ``[b, t]`` (cached keys included) and the slopes ``[h]``, so no
``[b, h, n, t]`` bias is ever built. Causality, padding and the model's own mask pattern (sliding
windows) come from the block mask, built once per forward by :func:`flex_mask`, which transformers calls
under our implementation name. A bias scheme without a positional ``score_mod`` (registered with
:func:`register_score_mod`) falls back to its dense bias read inside ``score_mod``; rotary schemes rotate
q/k first. CoPE is refused by its scheme: its positions are cumulative sums over keys, which a
``score_mod`` (one score at a time) cannot compute.

Compilation: ``torch.compile(flex_attention, dynamic=False)``, once per shape *bucket*. Query and key
lengths are padded to a bucket (:func:`bucket`: 1 for a decoding step, else a power of two from 16 to
1024, then multiples of 1024); the padded keys and queries are masked out by the block mask and the
padded rows dropped from the output. Static shapes, because torch's CPU kernel with dynamic sizes does
not build once ``score_mod`` reads a captured tensor at batch > 1 (``cur_kvSplitSize<N> was not declared
in this scope``, docs/notes.md, section 5). Buckets bound the recompiles to a few per run.

On CPU flex has a forward only: torch refuses inputs that require grad. Gradients into the positions
(hence the strength) do flow on CPU through the unfused (uncompiled) flex when q/k/v need none, and
on GPU through the compiled one.

Shape legend: ``b`` batch, ``h`` query heads, ``n`` queries, ``t`` keys, ``N``/``T`` their buckets, ``d`` head width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .attention_inputs import attention_inputs
from .state import STATE_ATTR, PatchState

__all__ = ["COMPILE", "RECOMPILE_LIMIT", "bucket", "flex_mask", "alibi_score_mod", "register_score_mod",
           "flex_attention_forward"]

#: compile flex_attention (and large block masks); ``False`` runs flex unfused, as for debugging: no compile
#: time, the full score matrix materialised (the fast CPU tests use it)
COMPILE = True
#: recompiles of flex_attention allowed while our calls run (dynamo's default of 8 is shared by every caller
#: of flex_attention in the process; past it dynamo runs flex unfused, with only a logged warning)
RECOMPILE_LIMIT = 64
#: block masks of more elements (``b * N * T``) are built by a compiled function rather than densely
DENSE_MASK_LIMIT = 2**24

_COMPILED: dict[str, Callable] = {}
#: bias scheme class -> factory ``(scheme, num_heads, q_pos [b, N], k_pos [b, T]) -> score_mod``
_SCORE_MODS: dict[type, Callable] = {}


def bucket(length: int) -> int:
    """The padded length compiled for ``length`` tokens: 1 stays 1 (a decoding step), then powers of two
    from 16 to 1024, then multiples of 1024; at most twice the work below 1024 tokens, a few compiles."""
    if length <= 1:
        return 1
    if length <= 1024:
        return max(16, 1 << (length - 1).bit_length())
    return -(-length // 1024) * 1024


def flex_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
              mask_function: Callable | None = None, attention_mask: torch.Tensor | None = None,
              device: torch.device | str = "cpu", **kwargs):
    """transformers' mask function for our flex implementation: its block mask (the model's own mask
    pattern, padding from the 2D ``attention_mask``, cache offsets), built at the bucketed lengths with the
    padded queries and keys masked out. Called once per forward and shared by the layers."""
    from torch.nn.attention.flex_attention import create_block_mask
    from transformers.masking_utils import (
        and_masks,
        causal_mask_function,
        padding_mask_function,
        prepare_padding_mask,
    )

    q_pad, kv_pad = bucket(q_length), bucket(kv_length)
    # Tensors, not ints: the block mask keeps this mask_mod, flex's compiled kernel reads it, and a static
    # compile specialises on every int it captures (the offset grows by one per decoding step).
    q_off, kv_off = torch.tensor(q_offset, device=device), torch.tensor(kv_offset, device=device)
    q_end, kv_end = q_off + q_length, kv_off + kv_length

    def in_bounds(batch_idx, head_idx, q_idx, kv_idx):
        return (q_idx < q_end) & (kv_idx < kv_end)

    parts = [mask_function or causal_mask_function, in_bounds]
    if attention_mask is not None:
        parts.append(padding_mask_function(prepare_padding_mask(attention_mask.bool(), kv_pad, kv_offset)))
    inner = and_masks(*parts)

    def mask_mod(batch_idx, head_idx, q_idx, kv_idx):  # (transformers' add_offsets_to_mask_function, tensors)
        return inner(batch_idx, head_idx, q_idx + q_off, kv_idx + kv_off)

    compile_mask = COMPILE and batch_size * q_pad * kv_pad > DENSE_MASK_LIMIT
    build = torch.compile(create_block_mask) if compile_mask else create_block_mask
    return build(mask_mod, batch_size, None, q_pad, kv_pad, device=device)


def alibi_score_mod(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, causal: bool) -> Callable:
    """ALiBi read from positions, as ``encodings/alibi.py`` builds it densely: ``+ m_h (p_j - p_i)`` causal
    (``-m_h (p_i - p_j)``), ``- m_h |p_i - p_j|`` bidirectional; float32 like the dense bias, then the
    score's dtype. ``slopes`` ``[h]``, ``q_pos`` ``[b, N]``, ``k_pos`` ``[b, T]`` (float32)."""
    if causal:
        def score_mod(score, b, h, q, kv):
            return score + (slopes[h] * (k_pos[b, kv] - q_pos[b, q])).to(score.dtype)
    else:
        def score_mod(score, b, h, q, kv):
            return score - (slopes[h] * (q_pos[b, q] - k_pos[b, kv]).abs()).to(score.dtype)
    return score_mod


def register_score_mod(scheme_cls: type, factory: Callable) -> None:
    """Let a bias scheme enter flex from positions: ``factory(scheme, num_heads, q_pos, k_pos)`` returns a
    ``score_mod`` (positions float32, padded to the buckets). Without one, its dense bias is read."""
    _SCORE_MODS[scheme_cls] = factory


def _alibi_factory(scheme, num_heads: int, q_pos: torch.Tensor, k_pos: torch.Tensor) -> Callable:
    from ..encodings.alibi import alibi_slopes

    return alibi_score_mod(alibi_slopes(num_heads).to(q_pos.device), q_pos, k_pos, scheme.plan.causal)


def _register_builtin() -> None:
    from .schemes.alibi import Alibi

    register_score_mod(Alibi, _alibi_factory)


_register_builtin()


def _pad(x: torch.Tensor, dim: int, length: int) -> torch.Tensor:
    """``x`` zero-padded along ``dim`` to ``length``."""
    extra = length - x.shape[dim]
    if extra <= 0:
        return x
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, extra]
    return F.pad(x, pad)


def _positional_score_mod(st: PatchState, query: torch.Tensor, key: torch.Tensor, q_pad: int,
                          kv_pad: int) -> Callable | None:
    """The scheme's ``score_mod`` for this layer (``None``: it adds nothing to the scores), built once per
    forward and shared by the layers."""
    scheme = st.scheme
    if scheme.contributes != "bias":
        return None
    heads, kv = query.shape[1], key.shape[2]
    memo_key = ("flex_score_mod", heads, query.dtype, query.shape[2], kv, q_pad, kv_pad)
    hit = st.step.memo.get(memo_key)
    if hit is not None:
        return hit
    factory = next((f for cls, f in _SCORE_MODS.items() if isinstance(scheme, cls)), None)
    if factory is not None:
        with st.step.sharing():
            q_pos = _pad(st.step.positions.float(), 1, q_pad)
            k_pos = _pad(st.step.key_positions[:, -kv:].float(), 1, kv_pad)
            score_mod = factory(scheme, heads, q_pos, k_pos)
    else:  # a bias scheme without a positional form: its dense bias, read per score
        _, _, bias = attention_inputs(st, query, key)
        with st.step.sharing():
            bias = _pad(_pad(bias, 2, q_pad), 3, kv_pad)

        def score_mod(score, b, h, q, kv_idx):
            return score + bias[b, h, q, kv_idx].to(score.dtype)
    st.step.memo[memo_key] = score_mod
    return score_mod


def _flex_function(device_type: str, compiled: bool) -> Callable:
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled or torch.compiler.is_compiling():  # (inside a compiled model: traced with it)
        return flex_attention
    fn = _COMPILED.get(device_type)
    if fn is None:
        fn = _COMPILED[device_type] = torch.compile(flex_attention, dynamic=False)
    return fn


def _cpu_backward_error() -> NotImplementedError:
    return NotImplementedError(
        "flex_attention has no backward on CPU (torch refuses inputs that require grad), so a patched model on "
        "flex_attention runs forwards only there: wrap inference in torch.no_grad() or torch.inference_mode(), "
        "and train on CPU with attn_implementation='sdpa' or 'eager' (load the model with it, or call "
        "model.set_attn_implementation('sdpa') before hf_trajpe.patch); on a GPU flex trains"
    )


def flex_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask, scaling: float | None = None, softcap: float | None = None,
                           s_aux: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """The ``hf_trajpe_flex`` attention function: ``query`` ``[b, h, n, d]``, ``key``/``value``
    ``[b, h_kv, t, d]``, ``attention_mask`` the block mask of :func:`flex_mask` (or ``None``). Pads to the
    mask's buckets, applies the patch's ``score_mod`` (modules not patched get none), returns ``[b, n, h, d]``."""
    from torch.nn.attention.flex_attention import BlockMask

    if kwargs.get("dropout", 0.0) > 0:
        raise ValueError("flex_attention does not support attention dropout: use it in eval mode (model.eval()) "
                         "or set the model's attention dropout to 0")
    if s_aux is not None:
        raise NotImplementedError("attention sinks (s_aux) are not supported by hf_trajpe's flex_attention path; "
                                  "use attn_implementation='eager' or 'sdpa'")
    if attention_mask is not None and not isinstance(attention_mask, BlockMask):
        raise NotImplementedError(
            f"hf_trajpe's flex_attention takes the block mask transformers builds for it, got a "
            f"{type(attention_mask).__name__}; pass the 2D padding mask as attention_mask")
    st: PatchState | None = module.__dict__.get(STATE_ATTR)
    if st is not None and st.scheme.contributes == "score":
        raise NotImplementedError(f"{st.plan.scheme} runs with attention implementations eager and sdpa only, not "
                                  "flex_attention: load the model with attn_implementation='sdpa'")
    if st is not None and st.scheme.contributes == "rotary":
            query, key, _ = attention_inputs(st, query, key)
    n, t = query.shape[2], key.shape[2]
    q_pad, kv_pad = attention_mask.seq_lengths if attention_mask is not None else (n, t)
    if q_pad < n or kv_pad < t:
        raise ValueError(f"the block mask covers {q_pad} queries x {kv_pad} keys, the attention has {n} x {t}; "
                         "flex_attention needs the mask of hf_trajpe's flex implementation (hf_trajpe_flex)")
    on_cpu = query.device.type == "cpu"
    if on_cpu and torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value)):
        raise _cpu_backward_error()
    positional = _positional_score_mod(st, query, key, q_pad, kv_pad) if st is not None else None

    def score_mod(score, b, h, q, kv):
        if softcap is not None:
            score = softcap * torch.tanh(score / softcap)
        if positional is not None:
            score = positional(score, b, h, q, kv)
        return score

    enable_gqa = query.shape[1] != key.shape[1]
    if enable_gqa and query.shape[1] & (query.shape[1] - 1):  # as transformers: repeat kv for odd head counts
        from transformers.integrations.flex_attention import repeat_kv

        key, value = repeat_kv(key, query.shape[1] // key.shape[1]), repeat_kv(value, query.shape[1] // value.shape[1])
        enable_gqa = False
    q, k, v = _pad(query, 2, q_pad), _pad(key, 2, kv_pad), _pad(value, 2, kv_pad)
    # On CPU the compiled kernel fails (IndexError in inductor) when a captured tensor needs grad; the
    # unfused flex returns those gradients.
    needs_grad = torch.is_grad_enabled() and st is not None and st.step is not None and (
        st.step.positions.requires_grad or (st.step.key_positions is not None and st.step.key_positions.requires_grad))
    fn = _flex_function(query.device.type, COMPILE and not (on_cpu and needs_grad))
    call = dict(score_mod=score_mod, block_mask=attention_mask, enable_gqa=enable_gqa, scale=scaling,
                kernel_options=kwargs.get("kernel_options"))
    if fn is _COMPILED.get(query.device.type):
        from torch._dynamo import config as dynamo_config

        with dynamo_config.patch(recompile_limit=RECOMPILE_LIMIT):
            out = fn(q, k, v, **call)
    else:
        import warnings

        with warnings.catch_warnings():  # the "called without torch.compile" advice: unfused on purpose here
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = fn(q, k, v, **call)
    return out[:, :, :n].transpose(1, 2).contiguous(), None
