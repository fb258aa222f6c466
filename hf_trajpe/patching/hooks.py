"""Forward hooks on the base model (``GPT2Model``, ``BertModel``, ``LlamaModel``, ...).

The pre-hook reads ``input_ids``/``inputs_embeds``, ``attention_mask`` and the KV cache, has the state
compute the positions of the new tokens, adds an additive scheme's vectors to the embeddings where the
model has no position table, and hands the model ``inputs_embeds`` (so the token embeddings are looked
up once). Nothing fractional ever enters the model's own ``position_ids``: transformers reads
non-unit steps in top-level ``position_ids`` as packed sequences (docs/notes.md). Patches with a layer
selection hand it the integer ranks of the real tokens (where the caller gave none), which the layers they
leave alone rotate by with the model's own rotary module.

The post-hook stores what the next decoding step needs on the returned cache object, claims the cache for the
patch (no other reader may add to it: cached_keys.py), and teaches the cache to carry that memory along when
its rows are reordered, selected or repeated, or its newest tokens cropped.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable

import torch
from torch import nn

from ..compat import cache_from_kwargs, output_cache
from .cached_keys import claim_cache
from .checkpointing import CheckpointSwitch
from .sources import real_ranks
from .state import MEMORY_ATTR, DecodingMemory, PatchState

__all__ = ["make_pre_hook", "make_post_hook"]


def positional_parameter_names(module: nn.Module) -> list[str]:
    sig = inspect.signature(type(module).forward)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.name != "self"]


def make_pre_hook(states: list[PatchState], runner: nn.Module, model_config, embed: nn.Module,
                  switch: CheckpointSwitch, rank_position_ids: bool = False) -> Callable:
    """``states``: the patches of the model (one, or one per layer selection); ``runner``: the module whose
    forward receives ``input_ids`` and the mask (the base model, or its decoder where the LM head calls that
    directly); ``embed``: the token embedding module. ``rank_position_ids``: hand the model the ranks of the
    real tokens as ``position_ids`` where the caller gave none, so the layers a layer selection leaves alone
    run the model's own rotary module at the positions every patched layer uses (a left-padded row then
    equals the row alone there too). ``switch``: the model's checkpointed layers, switched for each forward
    (checkpointing.py)."""
    names = positional_parameter_names(runner)
    accepts_token_types = "token_type_ids" in names
    lead = states[0]  # a patch of every layer is alone; it decides what enters the embeddings
    add_to_embeddings = lead.plan.hook == "embeddings"
    zero_token_types = accepts_token_types and lead.plan.family.token_type_ids

    def pre_hook(module, args, kwargs):
        for st in states:  # left by the post-hook, which runs even when the forward raises
            st.guard.enter(st.describe)
        kw = dict(zip(names, args, strict=False))
        kw.update(kwargs)
        input_ids, inputs_embeds = kw.get("input_ids"), kw.get("inputs_embeds")
        if inputs_embeds is None:
            if input_ids is None:
                return None  # let the model raise its own error
            inputs_embeds = embed(input_ids)
        use_cache = kw.get("use_cache")
        if use_cache is None:
            use_cache = bool(getattr(model_config, "use_cache", False)) and not module.training
        monitor = lead.monitor
        timer = (monitor.timed(inputs_embeds.shape[0] * inputs_embeds.shape[1], inputs_embeds.device)
                 if monitor is not None else contextlib.nullcontext())
        given = [st.next_texts for st in states]
        for st, texts in zip(states, given, strict=True):
            st.next_texts = None
            if texts is not None and st.call_texts is None:
                st.call_texts = texts
        try:
            with timer:
                for st in states:
                    st.begin_forward(inputs_embeds, input_ids, kw.get("attention_mask"), cache_from_kwargs(kw),
                                     bool(use_cache), getattr(embed, "weight", None), kw.get("position_ids"))
        finally:
            for st, texts in zip(states, given, strict=True):
                if texts is not None and st.call_texts is texts:
                    st.call_texts = None
        switch.begin()
        if add_to_embeddings:
            inputs_embeds = inputs_embeds + lead.additive(inputs_embeds)
        kw["inputs_embeds"] = inputs_embeds
        kw["input_ids"] = None
        if rank_position_ids and kw.get("position_ids") is None:
            b, n = inputs_embeds.shape[:2]
            mask = kw.get("attention_mask")
            mask = mask[:, -n:].to(inputs_embeds.device) if mask is not None else None
            ranks = real_ranks(mask, lead.step.past_real, b, n, inputs_embeds.device)[0]
            if lead.position_skips is not None:  # PoSE: the layers left alone skip as the patched ones do
                ranks = ranks + lead.position_skips.to(ranks.device, torch.int64)
            kw["position_ids"] = ranks
        if zero_token_types and kw.get("token_type_ids") is None:
            kw["token_type_ids"] = torch.zeros(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
        return (), kw

    return pre_hook


def make_post_hook(states: list[PatchState], switch: CheckpointSwitch) -> Callable:
    """Register with ``always_call=True``: it also ends a forward that raised (``output`` is then ``None``).
    ``switch``: the pre-hook's, whose checkpoint functions it restores."""

    def post_hook(module, args, kwargs, output):
        if not all(st.guard.held() for st in states):
            # this thread's forward was refused (another thread's is running): the state and the checkpoint switch
            # belong to that forward, which would otherwise lose its cache memory and the keys' rotation midway
            for st in states:
                st.guard.leave()
            return None
        try:
            cache = output_cache(output) if output is not None else None
            if cache is not None:
                stored = False
                for st in states:
                    if st.pending is not None:
                        cache.__dict__[st.memory_key] = st.pending
                        claim_cache(cache, st)
                        stored = True
                if stored:
                    _follow_rows(cache)
        finally:
            switch.end()
            for st in states:
                if st.step is not None:
                    st.step.end()
                    st.step = st.step.finished()
                st.pending = None  # (on the cache now, or not asked for)
                st.guard.leave()
        return None

    return post_hook


def _memories(cache) -> list[str]:
    return [k for k in cache.__dict__ if k.startswith(MEMORY_ATTR)]


def _follow_rows(cache) -> None:
    """Teach ``cache`` to carry our decoding memory (of every patch) along when its rows or length change through
    its own methods, as transformers calls them: ``reorder_cache`` (beam search), ``batch_select_indices`` and
    ``batch_repeat_interleave`` (a served batch, several return sequences), ``crop`` (assisted generation and prompt
    lookup after rejected draft tokens). Bound on the instance, once, as methods (a deep copy of the cache rebinds
    them to the copy)."""
    cls = type(cache)

    def rows(stock: Callable, index: Callable) -> Callable:
        def method(self, *args, **kwargs):
            batch = {k: self.__dict__[k].num_real.shape[0] for k in _memories(self)}
            stock(self, *args, **kwargs)
            for key, b in batch.items():
                mem: DecodingMemory = self.__dict__[key]
                self.__dict__[key] = mem.reorder(index(b, *args, **kwargs).to(mem.num_real.device))

        return method

    def selected(b: int, indices, *args, **kwargs) -> torch.Tensor:
        idx = torch.as_tensor(indices)
        return idx.nonzero().flatten() if idx.dtype == torch.bool else idx.long().flatten()

    def repeated(b: int, repeats: int, *args, **kwargs) -> torch.Tensor:
        return torch.arange(b).repeat_interleave(int(repeats))

    def crop(self, *args, **kwargs) -> None:
        before = int(self.get_seq_length())
        cls.crop(self, *args, **kwargs)
        removed = before - int(self.get_seq_length())
        for key in _memories(self):
            self.__dict__[key] = self.__dict__[key].crop(removed)

    methods = {"reorder_cache": (lambda: rows(cls.reorder_cache, selected)),
               "batch_select_indices": (lambda: rows(cls.batch_select_indices, selected)),
               "batch_repeat_interleave": (lambda: rows(cls.batch_repeat_interleave, repeated)),
               "crop": (lambda: crop)}
    for name, make in methods.items():
        if name not in cache.__dict__ and callable(getattr(cls, name, None)):
            cache.__dict__[name] = types.MethodType(make(), cache)
