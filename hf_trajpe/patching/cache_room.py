"""Room to grow in a dynamic KV cache layer: a decoding step writes its keys and values in place.

transformers' ``DynamicLayer.update`` concatenates: every decoding step copies the whole cache of every layer
(``torch.cat``), work that grows with the sequence. For a remap whose cache holds each key twice (Self-Extend,
ReRoPE) that copy is 1.5 times the stock model's (keys twice, values once), and at 16k tokens it was
most of the extra decoding time of those two remaps (docs/benchmarks.md). Here a layer gets a buffer with room after its
last key (an eighth of its length, at least :data:`MIN_ROOM` tokens); the layer's ``keys`` and ``values`` are
views of the buffer's first ``t`` rows, so everything that reads the layer (its length, masks, cropping, beam
search) sees exactly what ``torch.cat`` would have given, and a step writes only its new rows. When the room is
used up, or the layer's tensors are no longer the buffer's (cropped, reordered, repeated, moved), the next update
copies them into a new buffer, which the following steps fill.

Only for a plain ``DynamicLayer`` of a cache whose ``update`` is transformers' own and that does not offload
(sliding, quantized and static layers keep their own update), past :data:`GROW_FROM` cached tokens (below it the
copy is cheap and the bookkeeping is not), without autograd (a write in place would change a tensor a backward
saved). The values are the same floats: rows are copied, never computed. Rows a view was handed out for are never
written again. The price: the room stays with the layer while the cache lives (up to an eighth of its length plus
:data:`MIN_ROOM` rows; a deep copy copies it too), and the views are not contiguous across heads.

Shape legend: ``b`` batch, ``g`` key/value heads, ``t`` cached tokens, ``n`` new tokens, ``d`` head width.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["GROW_FROM", "MIN_ROOM", "ROOM_ATTR", "append_in_place"]

#: attribute of a cache layer holding ``(keys buffer, values buffer, rows in use, id of the layer)``
ROOM_ATTR = "_hf_trajpe_room"
#: the fewest cached tokens from which a layer gets room to grow (below, ``torch.cat`` copies little)
GROW_FROM = 1024
#: the least room a new buffer leaves after its last token
MIN_ROOM = 256


@functools.cache
def _cache_classes() -> tuple[type | None, object]:
    """transformers' ``DynamicLayer`` and ``Cache.update`` (``None`` where the installed version has no such layer)."""
    from transformers import cache_utils

    cache_type = getattr(cache_utils, "Cache", None)
    return getattr(cache_utils, "DynamicLayer", None), getattr(cache_type, "update", None)


def _holds(buffer: torch.Tensor, x: torch.Tensor, rows: int) -> bool:
    """Whether ``x`` is the buffer's first ``rows`` rows (a view the layer got from us and still has)."""
    return (x.data_ptr() == buffer.data_ptr() and x.shape[-2] == rows and x.shape[:-2] == buffer.shape[:-2]
            and x.shape[-1] == buffer.shape[-1] and x.stride() == buffer.stride() and x.dtype == buffer.dtype
            and x.device == buffer.device)


def _layer(cache, layer_idx: int):
    """The plain dynamic layer ``layer_idx`` of ``cache`` whose update only concatenates, or ``None``."""
    layers = getattr(cache, "layers", None)
    dynamic, update = _cache_classes()
    if (dynamic is None or not isinstance(layers, list) or not 0 <= layer_idx < len(layers)
            or type(layers[layer_idx]) is not dynamic or getattr(type(cache), "update", None) is not update
            or getattr(cache, "offloading", False)):
        return None
    return layers[layer_idx]


def _fits(old: torch.Tensor | None, new: torch.Tensor) -> bool:
    """Whether ``new`` ``[b, g, n, d]`` appends to ``old`` ``[b, g, t, d]`` as ``torch.cat`` would without
    converting (same batch, heads, width, dtype and device)."""
    return (torch.is_tensor(old) and old.dim() == 4 and new.dim() == 4 and old.shape[:2] == new.shape[:2]
            and old.shape[-1] == new.shape[-1] and old.dtype == new.dtype and old.device == new.device)


def append_in_place(cache, layer_idx: int, keys: torch.Tensor,
                    values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``cache``'s layer ``layer_idx`` with ``keys`` ``[b, g, n, dk]`` and ``values`` ``[b, g, n, dv]`` appended,
    written into the room of its buffer: what ``DynamicLayer.update`` returns, ``(keys, values)`` ``[b, g, t + n,
    .]``. ``None`` where this does not apply (module docstring): the caller runs the stock update, and the layer
    lets go of a buffer it no longer uses."""
    layer = _layer(cache, layer_idx)
    if layer is None:
        return None
    old_k, old_v = getattr(layer, "keys", None), getattr(layer, "values", None)
    n = keys.shape[-2] if keys.dim() == 4 else -1
    if (torch.is_grad_enabled() or not getattr(layer, "is_initialized", False) or not _fits(old_k, keys)
            or not _fits(old_v, values) or values.shape[-2] != n or old_v.shape[-2] != old_k.shape[-2]
            or old_k.shape[-2] + n < GROW_FROM):
        layer.__dict__.pop(ROOM_ATTR, None)
        return None
    t = old_k.shape[-2]
    room = layer.__dict__.get(ROOM_ATTR)
    reuse = (room is not None and room[3] == id(layer) and t + n <= room[0].shape[-2]
             and _holds(room[0], old_k, room[2]) and _holds(room[1], old_v, room[2])
             # (a buffer made under inference mode takes no write outside it)
             and (torch.is_inference_mode_enabled() or not room[0].is_inference()))
    if reuse:
        k_buf, v_buf = room[0], room[1]
    else:  # a new buffer: the layer's rows copied once, room after them
        layer.__dict__.pop(ROOM_ATTR, None)  # (the old one is not held while the new one is filled)
        rows = t + n + max(MIN_ROOM, (t + n) // 8)
        k_buf = old_k.new_empty(*old_k.shape[:2], rows, old_k.shape[-1])
        v_buf = old_v.new_empty(*old_v.shape[:2], rows, old_v.shape[-1])
        k_buf[..., :t, :].copy_(old_k)
        v_buf[..., :t, :].copy_(old_v)
    k_buf[..., t:t + n, :].copy_(keys)
    v_buf[..., t:t + n, :].copy_(values)
    layer.keys, layer.values = k_buf[..., :t + n, :], v_buf[..., :t + n, :]
    # (the layer's id: a shallow copy of the layer, which shares this tuple, makes a buffer of its own)
    layer.__dict__[ROOM_ATTR] = (k_buf, v_buf, t + n, id(layer))
    return layer.keys, layer.values
