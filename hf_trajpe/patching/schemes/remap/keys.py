"""The rotations of a remap (``scheme.py``) in one forward: the cos/sin of the positions at which each
region rotates its queries and each key rotation its keys, built once per forward and shared by all layers;
the keys rotated for every key rotation as they enter the KV cache; and the rotated keys attention reads.

A key's rotation in a remap depends on its own position only (``RemapScheme.regions``): Self-Extend rotates
its near keys at ``j`` and its far keys at ``j // G``, ReRoPE at ``j`` and 0 (leaky: ``j / k``), DCA every key
at ``j mod c``, STRING at ``j``. So while a patched forward runs with a cache object (cached_keys.py) the cache
stores each new key once per key rotation, side by side in its last axis (``[b, g, t, R x d]`` for ``R`` key
rotations: two for Self-Extend and ReRoPE, one for DCA and STRING), and a decoding step rotates only its
query. The last axis, because a model may reshape the keys the cache returns along the others before its
attention (JetMoE repeats their heads), and a key's copies then stay together. Whether a layer's keys arrive
rotated is known per layer and forward (:func:`holds_rotated_keys`), not from the tensor, which such a model
replaces. A cache filled without that (a forward given no cache object) keeps unrotated keys, which attention
rotates at every forward (:class:`RotatedKeys`).

Takes the patch state by duck typing (``plan``, ``scheme``, ``step``, ``cache_layers``), so it imports neither
the state nor the attention.

Shape legend: ``b`` batch, ``g`` key/value heads, ``n`` queries (new tokens), ``t`` keys, ``d`` head width,
``r`` rotary width.
"""

from __future__ import annotations

import torch

from ....encodings.rotary import rotary_cos_sin
from ...layer_frequencies import ROTARY_FREQUENCIES
from ...rotation import inference_tables, rotate_part

__all__ = ["RotatedKeys", "holds_rotated_keys", "key_tables", "query_tables", "rotate", "rotate_new_keys"]

def _layer_type(names: tuple[str | None, ...], memo: dict) -> str | None:
    """The first of ``names`` whose frequencies this forward holds; ``None``: one set for every layer."""
    return next((c for c in names if c is not None and (ROTARY_FREQUENCIES, c) in memo), None)


def _table(st, layer_type: str | None, positions: torch.Tensor, dtype: torch.dtype, device: torch.device) -> tuple:
    """``(cos, sin)`` ``[b, n|t, r]`` at ``positions`` and their :func:`~.rotation.inference_tables`
    ``[b, 1, n|t, r]``, from the model's frequencies in this forward (those of ``rope_parameters`` when given: the
    rotary stand-in records them in ``step.memo``)."""
    frequencies = st.step.memo.get((ROTARY_FREQUENCIES, layer_type))
    if frequencies is None:
        raise RuntimeError(f"{st.plan.scheme}: the model did not call its rotary module in this forward, from "
                           "which the remap takes its frequencies; this model's layers cannot be remapped")
    inv_freq, scaling = frequencies
    cos, sin = rotary_cos_sin(positions.to(device), inv_freq=inv_freq.to(device), attention_scaling=scaling,
                              dtype=dtype)
    return (cos, sin, *inference_tables(cos, sin))


def query_tables(st, names: tuple[str | None, ...], dtype: torch.dtype, device: torch.device) -> tuple:
    """Per region the rotation table of this forward's queries, per region the index of its key rotation, and the
    query positions ``[b, n]``; built once per forward (and layer type)."""
    step = st.step
    layer_type = _layer_type(names, step.memo)
    memo_key = ("remap_q", layer_type, dtype, device)
    if memo_key not in step.memo:
        queries = step.positions.to(device)
        positions, which = st.scheme.query_rotations(queries)
        with step.sharing():  # (for all layers: not part of one layer's checkpoint; checkpointing.py)
            step.memo[memo_key] = ([_table(st, layer_type, p, dtype, device) for p in positions], which, queries)
    return step.memo[memo_key]


def key_tables(st, names: tuple[str | None, ...], kv: int, dtype: torch.dtype, device: torch.device) -> list:
    """Per key rotation the table of the last ``kv`` keys (the new tokens' when ``kv`` is their number); built once
    per forward (and layer type, and number of keys: a sliding-window layer's cache returns fewer)."""
    step = st.step
    layer_type = _layer_type(names, step.memo)
    memo_key = ("remap_k", layer_type, kv, dtype, device)
    if memo_key not in step.memo:
        positions = st.scheme.key_rotations(step.key_positions[:, -kv:].to(device))
        with step.sharing():
            step.memo[memo_key] = [_table(st, layer_type, p, dtype, device) for p in positions]
    return step.memo[memo_key]


def rotate(x: torch.Tensor, table: tuple, start: int, stop: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` ``[b, heads, stop - start, d]`` rotated by rows ``[start, stop)`` of ``table`` (:func:`query_tables`),
    written into ``out`` when given (without autograd). Without autograd in two passes (a product and, per half of
    the rotary width, one fused multiply-add), which is several times faster than ``rotate_part`` (its ``roll``
    copies) and equal to it up to float rounding."""
    cos, sin, cos4, signed_sin4 = table
    if torch.is_grad_enabled() and x.requires_grad:
        y = rotate_part(x, cos[:, start:stop], sin[:, start:stop])
        return y if out is None else out.copy_(y)
    cos4, signed_sin4 = cos4[:, :, start:stop], signed_sin4[:, :, start:stop]
    r = cos4.shape[-1]
    half = r // 2
    if out is None:
        y = x * cos4 if r == x.shape[-1] else torch.cat((x[..., :r] * cos4, x[..., r:]), dim=-1)
    else:
        y = out
        torch.mul(x[..., :r], cos4, out=y[..., :r])
        if r < x.shape[-1]:
            y[..., r:].copy_(x[..., r:])
    y[..., :half].addcmul_(x[..., half:r], signed_sin4[..., :half])
    y[..., half:r].addcmul_(x[..., :half], signed_sin4[..., half:])
    return y


def rotate_new_keys(st, keys: torch.Tensor, layer_idx: int) -> torch.Tensor:
    """The keys of this forward's new tokens ``[b, g, n, d]`` rotated at their positions of each key rotation,
    side by side in the last axis: ``[b, g, n, R x d]`` (the KV cache stores them: module docstring)."""
    b, g, n, d = keys.shape
    tables = key_tables(st, st.cache_layers[layer_idx], n, keys.dtype, keys.device)
    if len(tables) == 1:
        return rotate(keys, tables[0], 0, n)
    if torch.is_grad_enabled() and keys.requires_grad:
        return torch.cat([rotate(keys, table, 0, n) for table in tables], dim=-1)
    out = keys.new_empty(b, g, n, len(tables) * d)
    for index, table in enumerate(tables):
        rotate(keys, table, 0, n, out=out[..., index * d:(index + 1) * d])
    return out


def holds_rotated_keys(st, module) -> bool:
    """Whether ``module``'s keys in this forward come from a cache that stores them rotated (a forward with a
    cache object the state prepares, on a layer it registered: cached_keys.py)."""
    return st.step.cache is not None and getattr(module, "layer_idx", None) in st.cache_layers


class RotatedKeys:
    """The keys rotated for each key rotation, read per range of keys: a prepared cache's copies
    (:func:`rotate_new_keys`), or unrotated keys rotated here, all of them once per layer where several blocks
    read them (``whole``), else only the range a segment asks for."""

    def __init__(self, st, names: tuple[str | None, ...], key: torch.Tensor, width: int, rotations: int,
                 prepared: bool, whole: bool) -> None:
        """``key``: ``[b, g, t, d]`` unrotated, or ``[b, g, t, rotations x d]`` from a prepared cache (the state
        refuses a cache another patch filled); ``width``: ``d``, the queries' head width."""
        self.key, self.whole, self.rotated, self.tables = key, whole, {}, None
        if prepared:
            if key.shape[-1] != rotations * width:
                raise RuntimeError(
                    f"{st.plan.scheme}: the keys this layer attends to are {key.shape[-1]} wide, not one copy of "
                    f"{width} per key rotation ({rotations}) as its KV cache stores them: this model changes the "
                    "cached keys before its attention; generate with use_cache=False, or patch without a remap")
            # where several blocks read them (a prefill), each copy gathered once: the fused kernel reads keys
            # in storage of their own faster than every other slice of the last axis
            copies = [key[..., i * width:(i + 1) * width] for i in range(rotations)]
            self.rotated = dict(enumerate(c.contiguous() if whole else c for c in copies))
        else:
            self.tables = key_tables(st, names, key.shape[2], key.dtype, key.device)

    def __call__(self, index: int, start: int, stop: int) -> torch.Tensor:
        """Keys ``[start, stop)`` rotated by key rotation ``index``: ``[b, g, stop - start, d]``."""
        if index in self.rotated:
            return self.rotated[index][:, :, start:stop]
        if self.whole:
            self.rotated[index] = rotate(self.key, self.tables[index], 0, self.key.shape[2])
            return self.rotated[index][:, :, start:stop]
        return rotate(self.key[:, :, start:stop], self.tables[index], start, stop)
