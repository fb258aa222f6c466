"""Rotated keys in the KV cache: RoPE inside attention does O(1) work per decoding step.

On a model without a rotary module (GPT-2, BERT, OPT, ...) the patch rotates queries and keys inside
attention. The model stores its keys in the KV cache *before* attention, unrotated, so every decoding
step used to rotate the whole cache again in every layer: work that grows with the sequence, for keys
whose positions never change (a past token's trajectory position is fixed once computed). Here the
cache's ``update`` rotates the new keys on their way in: the cache holds rotated keys, each key is rotated
once, and attention rotates only the queries. The remaps (Self-Extend, ReRoPE, DCA, STRING) run their
rotation inside attention too, at positions per region; a key's positions there follow from its own
position alone, so their cache stores each new key once per key rotation of the scheme, side by side in the
last axis (schemes/remap/keys.py): two copies of the keys for Self-Extend and ReRoPE, one for DCA and STRING. How a
kind of scheme stores its keys is a registry (:data:`KEY_ROTATIONS`).

How: while a patched forward runs with a cache object (``generate()`` passes one from the prefill on),
the cache's ``update`` is wrapped on that instance (:func:`prepare_cache`); the wrapper rotates the new
keys of the patched self-attention layers (their ``layer_idx``) with the positions of this forward's new
tokens and records the tensor the cache returns, so attention knows it is already rotated
(:func:`is_prepared`; a remap's attention knows it per layer instead, schemes/remap/keys.py). The decoding memory
says whether a cache holds rotated keys, and for which patch (``DecodingMemory.prepared``; a remap refuses a
cache another patch rotated); a cache filled without the wrapper (a forward given no cache object, which the
model then creates itself) keeps the old path: its keys are rotated inside attention at every step.
The values are bit-identical either way: a rotation is elementwise, so rotating a key alone or inside the
whole cache gives the same floats (the cached-generation tests compare with recomputation).

Shape legend: ``b`` batch, ``g`` key/value heads, ``n`` new tokens, ``d`` head width.
"""

from __future__ import annotations

import types
import weakref

import torch

from .cache_room import append_in_place
from .rotary_tables import rotate_new_keys

__all__ = ["KEY_ROTATIONS", "PREPARE_ATTR", "READERS_ATTR", "claim_cache", "is_prepared", "prepare_cache"]

#: attribute of a cache object: ``{layer_idx: weak reference to the state whose forwards prepare that layer's keys}``
PREPARE_ATTR = "_hf_trajpe_prepare"
#: attribute of a cache object: ``{memory key: (weak reference to the state, its description)}`` of the patches
#: whose positions the cache holds (:func:`claim_cache`)
READERS_ATTR = "_hf_trajpe_readers"
#: the kind of a scheme (``Scheme.contributes``) -> the keys its layer stores for this forward's new keys
#: ``[b, g, n, d]``: ``(state, keys, layer_idx) -> keys to store``. RoPE inside attention stores them rotated at
#: their positions; a scheme that computes attention itself says what it stores (``Scheme.rotate_new_keys``: a
#: remap once per key rotation, side by side in the last axis)
KEY_ROTATIONS = {"rotary": rotate_new_keys}


def _prepared_update(cache, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
    """The cache's ``update``, rotating ``key_states`` ``[b, g, n, d]`` first when a patched forward that
    prepares this cache is running and the layer is one of its attention layers; refused when the cache holds a
    patch's positions and no forward of that patch is running (:func:`claim_cache`)."""
    stock = type(cache).update
    readers = cache.__dict__.get(READERS_ATTR)
    if readers:
        _check_reader(cache, readers)
    ref = cache.__dict__.get(PREPARE_ATTR, {}).get(layer_idx)
    state = ref() if ref is not None else None
    step = state.step if state is not None else None
    if step is None or step.cache is not cache:
        return stock(cache, key_states, value_states, layer_idx, *args, **kwargs)
    rotation = KEY_ROTATIONS.get(state.contributes)
    stored = (rotation(state, key_states, layer_idx) if rotation is not None
              else state.scheme.rotate_new_keys(state, key_states, layer_idx))
    grown = append_in_place(cache, layer_idx, stored, value_states)  # (cache_room.py: no copy of the whole cache)
    keys, values = grown if grown is not None else stock(cache, stored, value_states, layer_idx, *args, **kwargs)
    step.prepared_keys[id(keys)] = keys
    return keys, values


def claim_cache(cache, state) -> None:
    """``state``'s patch fills or continues ``cache``: from now on only forwards of the patches that claimed it may
    add to it. The cache holds that patch's positions (and a remap's keys rotated for it): the stock model after
    ``unpatch()``, or another model, would read them as its own, silently wrong or failing deep inside attention."""
    if not callable(getattr(type(cache), "update", None)):
        return
    cache.__dict__.setdefault(READERS_ATTR, {})[state.memory_key] = (weakref.ref(state), state.describe())
    if "update" not in cache.__dict__:
        cache.update = types.MethodType(_prepared_update, cache)


def _check_reader(cache, readers: dict) -> None:
    """Refuse an update of a claimed cache outside a forward of a patch that claimed it; an emptied cache
    (``reset()``, cropped to nothing) holds no positions any more and is free again."""
    for ref, _ in readers.values():
        state = ref()
        if state is not None and state.guard.held():
            return
    if int(cache.get_seq_length()) == 0:
        del cache.__dict__[READERS_ATTR]
        return
    patches = "; ".join(dict.fromkeys(described for _, described in readers.values()))
    raise RuntimeError(
        f"this KV cache was filled by a model patched with {patches} and holds that patch's positions, which "
        "this forward (the model after unpatch(), or another model) would read as its own; start generation again "
        "from this model as it is now, or pass no cache")


def prepare_cache(state, cache) -> bool:
    """Have ``cache`` rotate the keys it stores for ``state``'s layers (``state.cache_layers``) during its
    forwards; ``False`` if it has no ``update`` method to wrap. Several patches of one model (disjoint layer
    selections) each register their layers. Bound as a method of the instance, so a deep copy of the cache
    wraps its own."""
    if not callable(getattr(type(cache), "update", None)):
        return False
    if "update" not in cache.__dict__:
        cache.update = types.MethodType(_prepared_update, cache)
    layers = cache.__dict__.setdefault(PREPARE_ATTR, {})
    ref = weakref.ref(state)
    for i in state.cache_layers:
        layers[i] = ref
    return True


def is_prepared(step, key: torch.Tensor) -> bool:
    """Whether ``key`` is what a prepared cache returned in this forward (its keys all rotated)."""
    return step.prepared_keys.get(id(key)) is key
