"""The attention of a remap (scheme.py): per region, the scores of queries and keys rotated at that region's
positions; per pair, the score of its region; one softmax over all keys. What the attention function got and
what the forward prepared are gathered into one call (:class:`~.kernels.RemapCall`), which a kernel of the list
in ``kernels/`` computes: the one the patch's ``kernel`` option names, or the first that can run it.

The model's rotary module gives the identity rotation while such a patch is in force (modules.py, or the layer
hooks of a layer selection), so ``query`` and ``key`` arrive unrotated. A key's rotation depends on its own
position only, so where ``generate()`` (or any caller) passes a cache object, the cache stores each new key
rotated once per key rotation of the scheme, side by side in the last axis (keys.py, cached_keys.py), and
``key`` arrives rotated: a decoding step rotates its query only. Keys of a cache the model made itself arrive
unrotated and are rotated once per key rotation (:class:`~.keys.RotatedKeys`). The cos/sin of the remapped
positions are built once per forward and shared by all layers (keys.py).

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``n`` queries, ``t`` keys, ``d`` head width.
"""

from __future__ import annotations

import warnings

import torch

from ...layer_frequencies import layer_type_names
from .kernels import RemapCall, choose_kernel
from .keys import holds_rotated_keys, query_tables

__all__ = ["remap_attention"]


def remap_attention(st, module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                    softcap: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """Attention of ``query`` ``[b, h, n, d]`` over ``value`` ``[b, g, t, d]`` and ``key``: ``[b, g, t, d]``
    unrotated, or ``[b, g, t, R x d]`` rotated for each of the scheme's ``R`` key rotations where a prepared KV
    cache returned it (keys.py), with the scheme's remapped positions; returns ``([b, n, h, d], None)`` as
    transformers' attention functions do (no weights: they are never built whole)."""
    d, t = query.shape[-1], key.shape[2]
    if kwargs.get("output_attentions") or getattr(getattr(module, "config", None), "output_attentions", False):
        warnings.warn(f"output_attentions: {st.plan.scheme} is a remap, which computes attention region by region and "
                      "never builds the attention weights whole, so the model returns none; read them from the model "
                      "without the patch (hf_trajpe.unpatch(model), attn_implementation='eager')", UserWarning,
                      stacklevel=2)
    if attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[1] > 1:
        raise NotImplementedError(
            f"{type(module).__name__} hands its attention a mask per head ({tuple(attention_mask.shape)}: values "
            "the model computes for each head, as Doge's dynamic mask attention does); the remap attention reads "
            "masks as allowed / masked pairs shared by all heads and would drop those values. Use a frequency "
            "scaling (rope_parameters) on this model instead of a remap")
    if scaling is None:
        scaling = getattr(module, "scaling", None) or d ** -0.5
    names = layer_type_names(module)
    tables, which, query_positions = query_tables(st, names, query.dtype, query.device)
    key_positions = st.step.key_positions[:, -t:].to(query.device)
    scale = _score_scale(st, key_positions)
    if scale is not None:  # (a factor on every score of a row: on its queries, before the rotation, which is linear)
        query = query * scale.to(device=query.device, dtype=query.dtype)[:, None, None, None]
    call = RemapCall(st, module, query, key, value, attention_mask, scaling, dropout, softcap,
                     kwargs.get("s_aux"),  # a learned logit per head in every softmax (gpt-oss), its weight dropped
                     tables, which, query_positions, key_positions, names, holds_rotated_keys(st, module))
    kernel = choose_kernel(st.scheme.kernel, call)
    st.__dict__["kernel_used"] = kernel.name  # (PatchState.kernel_used, without nn.Module's checks: per layer and step)
    return kernel.run(call).transpose(1, 2).contiguous(), None


def _score_scale(st, key_positions: torch.Tensor) -> torch.Tensor | None:
    """The scheme's factor on the scores of each row (``RemapScheme.score_scale``), once per forward."""
    memo = st.step.memo
    memo_key = ("remap_score_scale", key_positions.shape[1])
    if memo_key not in memo:
        memo[memo_key] = st.scheme.score_scale(key_positions)
    return memo[memo_key]
