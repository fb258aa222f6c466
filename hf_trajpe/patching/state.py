"""``PatchState``: what a patched model carries between its hooks, replacement modules and attention
functions, attached to the model as ``model.hf_trajpe``.

It holds the plan's scheme (an ``nn.Module``), the strength (so a learnable one trains, moves with
``.to()`` and is saved), the position source, and the positions of the current forward. Per forward:
the pre-hook calls :meth:`PatchState.begin_forward`; the replacement modules and attention functions
read :attr:`PatchState.step`; the post-hook stores :attr:`PatchState.pending` on the KV cache.

Shape legend: ``b`` batch, ``n`` new tokens, ``t`` all key positions (cache + new), ``d`` width.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from ..cache import DisplacementCache
from ..encodings.trajectory import TrajectoryPast
from .cached_keys import claim_cache, prepare_cache
from .guard import ForwardGuard
from .plan import PatchPlan, plan_strength
from .schemes import get_scheme
from .sources import RankPositions, TrajectoryPositions, real_ranks

__all__ = ["DecodingMemory", "PatchState", "PatchStates", "Step", "MEMORY_ATTR", "STATE_ATTR",
           "bind_state"]

#: attribute of the KV cache object that holds :class:`DecodingMemory`
MEMORY_ATTR = "_hf_trajpe_memory"
#: attribute (in ``__dict__``, not a submodule) by which patched modules find the state
STATE_ATTR = "_hf_trajpe_state"
#: the plain fields of a ``PatchState`` that each forward sets (``PatchState.__setattr__``)
_PER_FORWARD = frozenset({"step", "pending", "next_texts", "call_texts"})


def bind_state(module: nn.Module, state: PatchState | None) -> None:
    """Point a module at the state without registering it as a submodule (no cycles, no keys)."""
    if state is None:
        module.__dict__.pop(STATE_ATTR, None)
    else:
        module.__dict__[STATE_ATTR] = state


@dataclass
class DecodingMemory:
    """Stored on the KV cache object between decoding steps."""

    num_real: torch.Tensor | None  # [b] real tokens seen
    key_positions: torch.Tensor | None  # [b, t] positions of every cached key (attention-side schemes)
    trajectory: TrajectoryPast | None
    #: the patch (its description) whose rotation the cached keys carry (cached_keys.py; a remap's: one copy per key
    #: rotation); ``None``: unrotated keys
    prepared: str | None = None
    #: what a scheme that reads token ids kept of them so far (``Scheme.read_units``: the units of meaning of
    #: Self-Extend over units); ``None``: none
    units: object | None = None
    #: the patch (its description) that filled the cache: any other reader is refused by name
    filled_by: str | None = None
    #: why the next forward cannot continue from this memory (a crop that the trajectory positions or the units of
    #: meaning cannot follow: they depend on every earlier token); ``None``: it can
    stale: str | None = None

    def reorder(self, idx: torch.Tensor) -> DecodingMemory:
        """Select rows ``idx`` (long ``[b']``), as beam search reorders its cache and ``batch_select_indices`` and
        ``batch_repeat_interleave`` select and repeat its rows."""
        return DecodingMemory(
            self.num_real.index_select(0, idx),
            None if self.key_positions is None else self.key_positions.index_select(0, idx),
            None if self.trajectory is None else self.trajectory.reorder(idx),
            self.prepared,
            None if self.units is None else self.units.reorder(idx),
            self.filled_by,
            self.stale,
        )

    def crop(self, removed: int) -> DecodingMemory:
        """The memory after the cache dropped its newest ``removed`` tokens (``DynamicCache.crop``: assisted
        generation and prompt lookup after rejected draft tokens, or a caller regenerating an answer). The dropped
        tokens are the newest of every row, so they are real tokens (left padding), and each row's count of real
        tokens drops by as many. Ranks and key positions follow exactly; trajectory positions and units of meaning
        depend on every earlier token and cannot be taken back: the next forward is refused instead."""
        if removed <= 0:
            return self
        kept = None if self.key_positions is None else self.key_positions[:, :max(0, self.key_positions.shape[1]
                                                                                      - removed)]
        stale = self.stale
        if self.trajectory is not None:
            stale = "trajectory positions"
        elif self.units is not None:
            stale = "units of meaning"
        return DecodingMemory((self.num_real - removed).clamp_(min=0), kept, self.trajectory, self.prepared,
                              self.units, self.filled_by, stale)


class Step:
    """Positions of one forward plus lazily built tensors shared by all layers (``memo``)."""

    def __init__(self, positions: torch.Tensor, key_positions: torch.Tensor | None,
                 past_real: torch.Tensor | None = None, cache=None) -> None:
        self.positions = positions  # [b, n] float32; pad tokens 0
        self.key_positions = key_positions  # [b, t] or None
        self.past_real = past_real  # [b] real tokens before this forward (in the KV cache), or None
        self.memo: dict = {}
        #: the KV cache whose new keys this forward rotates on their way in (cached_keys.py), or None
        self.cache = cache
        #: id -> the key tensors that cache returned in this forward (rotated already)
        self.prepared_keys: dict[int, torch.Tensor] = {}
        #: the layers of this forward are checkpointed (checkpointing.py): a layer runs again in the backward
        self.checkpointed = False

    def sharing(self) -> contextlib.AbstractContextManager:
        """Where a tensor for all layers is built (``memo``): under activation checkpointing, the tensors its
        autograd graph saves are kept as without checkpointing, not as part of the checkpoint of the layer
        that happens to build it, whose replay finds it built (checkpointing.py)."""
        if not self.checkpointed:
            return contextlib.nullcontext()
        return torch.autograd.graph.saved_tensors_hooks(_kept, _kept)

    def end(self) -> None:
        """The forward is over: its cache no longer rotates keys for it (a later forward of the stock model, or
        of another patch, may use that cache) and the cache's key tensors are not kept alive here."""
        self.cache = None
        self.prepared_keys.clear()

    def finished(self) -> Step:
        """What the state keeps of this step once the forward is over: its positions without their autograd
        graph and none of its shared tensors. A graph kept on the model between forwards would keep its memory
        alive until the next forward and make ``copy.deepcopy(model)`` fail (only leaf tensors copy); the
        backward of this forward does not need the state for it (checkpointed layers hold their step). Without
        autograd (each ``generate()`` step) nothing has a graph: this step is kept, its shared tensors dropped."""
        if not self.checkpointed and not torch.is_grad_enabled():
            self.positions, self.key_positions = _detached(self.positions), _detached(self.key_positions)
            self.past_real, self.memo = _detached(self.past_real), {}
            return self
        return Step(_detached(self.positions), _detached(self.key_positions), _detached(self.past_real))


def _kept(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _detached(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """``tensor`` without its graph (itself when it has none, as in every ``generate()`` step: no op dispatched)."""
    return tensor.detach() if tensor is not None and tensor.requires_grad else tensor


def check_position_ids(position_ids: torch.Tensor, mask, memory: DecodingMemory | None, b: int, n: int,
                       device) -> None:
    """Refuse ``position_ids`` that differ from what the patch computes: the rank of each real token,
    continuing after the cache. Offsets and packed sequences would otherwise be ignored silently."""
    if _decoding_ranks_match(position_ids, memory, b, n):
        return
    real = torch.ones(b, n, dtype=torch.bool, device=device) if mask is None else mask.bool()
    rank = real.to(torch.int64).cumsum(dim=1) - 1
    if memory is not None and memory.num_real is not None:
        rank = rank + memory.num_real.to(device)[:, None]
    pid = position_ids.to(device)
    if pid.dim() == 1:
        pid = pid[None]
    if pid.dim() != 2 or pid.shape[-1] != n or pid.shape[0] not in (1, b):
        raise ValueError(f"position_ids must be [batch, seq] = {(b, n)}, got shape {tuple(position_ids.shape)}")
    if not bool(((pid == rank) | ~real).all()):  # one host sync, only when the caller passes position_ids
        raise ValueError(
            "hf_trajpe patched models place tokens themselves: position i of each row is the rank of its real "
            "tokens (from the 2D attention_mask, continuing after the KV cache), and position_ids that "
            "differ (an offset start, packed sequences) are not supported. Pass position_ids=None, or "
            "attention_mask.cumsum(-1) - 1; give packed sequences as separate rows with padding"
        )


@functools.lru_cache(maxsize=32)
def _is_static_cache(cache_type: type) -> bool:
    return any(c.__name__ == "StaticCache" for c in cache_type.__mro__)


def _decoding_ranks_match(position_ids: torch.Tensor, memory: DecodingMemory | None, b: int, n: int) -> bool:
    """A decoding step's usual ``position_ids`` (``generate()`` passes them at every token): one new token per row,
    numbered by the real tokens before it, which is the rank the patch gives a real token there whatever the mask
    says (a pad token's id is not checked). One comparison instead of the dozen ops of the general check, which
    runs when this one does not hold."""
    if (n != 1 or memory is None or memory.num_real is None or position_ids.dim() not in (1, 2)
            or position_ids.shape[-1] != 1 or position_ids.numel() != b):
        return False
    before = memory.num_real
    if position_ids.dtype != before.dtype or position_ids.device != before.device:
        return False
    return torch.equal(position_ids.reshape(b), before)


class PatchState(nn.Module):
    """The per-model state of a patch (see the module docstring)."""

    def __init__(self, plan: PatchPlan, eager_fn=None) -> None:
        super().__init__()
        self.plan = plan
        self.config = plan.config
        self.family = plan.family
        self.scheme = get_scheme(plan.scheme)(plan)
        self.strength = plan_strength(plan)
        cache = DisplacementCache(plan.config.cache_size) if plan.trajectory and plan.config.cache else None
        self.source = TrajectoryPositions(cache) if plan.trajectory else RankPositions()
        #: the stock eager attention function of the family, when our attention functions run
        self.eager_fn = eager_fn
        #: texts of the current call for ``strength="auto"`` (``PatchHandle.texts``); ``None`` outside one
        self.call_texts: list[str] | None = None
        #: texts for the next forward only (``PatchHandle.set_texts``)
        self.next_texts: list[str] | None = None
        #: a tokenizer that turns ``input_ids`` into texts for ``strength="auto"`` (``PatchHandle.set_tokenizer``)
        self.tokenizer = None
        #: a ``TrajectoryMonitor`` (docs/spec.md, section 5) or ``None``; ``PatchHandle.attach_monitor``
        self.monitor = None
        self.step: Step | None = None
        self.pending: DecodingMemory | None = None
        #: one forward at a time (guard.py): the two fields above belong to the forward in progress
        self.guard = ForwardGuard()
        #: real tokens whose trajectory position was clamped at the position limit, since patching
        self.clamped_tokens = 0
        #: the batch-length dependence of dynamic NTK and LongRoPE was said (``_note_batch_scaling``)
        self.batch_scaling_noted = False
        #: ``[b, n]`` skips added to the positions of each forward (PoSE training,
        #: :mod:`hf_trajpe.training.pose`); ``None``: the positions as the source computes them
        self.position_skips: torch.Tensor | None = None
        #: attribute of the KV cache object holding this state's :class:`DecodingMemory` (one per patch of a model)
        self.memory_key = MEMORY_ATTR
        #: ``layer_idx`` of the self-attention modules our attention functions serve, when the KV cache
        #: should store their keys rotated (RoPE inside attention, a remap: cached_keys.py), each with the names
        #: of its layer type (layer_frequencies.layer_type_names); set when they are bound
        self.cache_layers: dict[int, tuple[str | None, ...]] = {}
        #: ``(beta, detach, extend)`` of the plan's (immutable) config, read once: an option's lookup resolves
        #: the declared options of every scheme, which every forward (each generated token) would repeat
        cfg = plan.config
        self._trajectory_config = (cfg.beta, cfg.detach, cfg.extend)
        #: what the scheme contributes (``Scheme.contributes``) and whether the forward keeps key positions and
        #: reads token ids, read once: a submodule's attribute goes through ``nn.Module.__getattr__``, and the
        #: attention functions of every layer ask at every generated token
        self.contributes: str = self.scheme.contributes
        self.computes_attention: bool = self.scheme.computes_attention
        #: the kernel that computed a scheme's own attention in the last forward (``Scheme.attend``: a remap's
        #: ``kernel`` option, ``auto`` resolved per input); ``None`` before one, or for other schemes
        self.kernel_used: str | None = None
        self.keeps_key_positions: bool = plan.key_positions
        self.reads_token_ids: bool = self.scheme.reads_token_ids

    def __setattr__(self, name: str, value) -> None:
        # the fields every forward sets (twice per generated token) hold no parameter, buffer or module: stored
        # without nn.Module's checks, which cost several microseconds each
        if name in _PER_FORWARD:
            self.__dict__[name] = value
        else:
            super().__setattr__(name, value)

    def trajectory_options(self) -> dict:
        """Keyword arguments of ``trajectory_positions`` for this patch (positions clamped by the source)."""
        beta, detach, _ = self._trajectory_config
        return dict(beta=beta, max_positions=None, detach=detach, monitor=self.monitor)

    def extension(self) -> float | None:
        """The content-aware extension factor of trajectory positions (``extend``), or ``None``."""
        return self._trajectory_config[2]

    def keeps_full_state(self) -> bool:
        """Whether decoding after a call needs the call's full trajectory state: a causal model."""
        return self.plan.causal

    def position_limit(self) -> int | None:
        return self.plan.max_positions

    def report_clamped(self, count: int) -> None:
        """Count clamped positions; the first time, say so (a clamped position silently merges tokens)."""
        if self.clamped_tokens == 0:
            warnings.warn(
                f"hf_trajpe: {count} trajectory position(s) reached past the position limit "
                f"(max_positions={self.plan.max_positions}, {self.describe()}) and were clamped to "
                f"{self.plan.max_positions - 1}; " + (
                    "the learned table ends there: use a smaller strength or shorter sequences"
                    if get_scheme(self.plan.scheme).reads_table
                    else "raise max_positions, or leave it unset for no limit")
                + ". Shown once; PatchHandle.clamped_tokens counts them all.",
                RuntimeWarning,
                stacklevel=4,
            )
        self.clamped_tokens += count
        if self.monitor is not None:
            self.monitor.record_clamped(count)

    @property
    def displacement_cache(self) -> DisplacementCache | None:
        return getattr(self.source, "displacement_cache", None)

    @property
    def _auto_alpha(self) -> torch.Tensor | None:
        """The last strength picked by ``strength="auto"``."""
        return getattr(self.source, "auto_alpha", None)

    def describe(self) -> str:
        described = self.__dict__.get("_described")
        if described is None:  # (the plan is immutable; every forward with a cache asks)
            described = self.__dict__["_described"] = self.plan.describe()
        return described

    def extra_repr(self) -> str:
        return self.describe()

    # -- positions -------------------------------------------------------------------------------
    def begin_forward(
        self,
        embeddings: torch.Tensor,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        past_key_values,
        use_cache: bool,
        embedding_weight: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> None:
        """Compute the positions of this forward (``embeddings``: token embeddings ``[b, n, d]``;
        ``embedding_weight``: the token embedding matrix, whose version keys the displacement cache;
        ``position_ids``: the caller's, checked against the ranks the mask implies)."""
        b, n = embeddings.shape[:2]
        device = embeddings.device
        past_len = 0
        memory = None
        if past_key_values is not None and _is_static_cache(type(past_key_values)):
            raise NotImplementedError(
                "hf_trajpe patched models do not support static KV caches (generate(cache_implementation="
                "'static'), StaticCache): they pass a 4D mask and fixed-size buffers, and the patch needs the "
                "2D padding mask to place tokens. Use the default dynamic cache (omit cache_implementation)"
            )
        if past_key_values is not None and hasattr(past_key_values, "get_seq_length"):
            past_len = int(past_key_values.get_seq_length())
            if past_len:
                memory = past_key_values.__dict__.get(self.memory_key)
                if memory is None:
                    if self.plan.trajectory or self.plan.uses_attention:
                        raise RuntimeError(
                            "this KV cache was not produced by the patched model, so hf_trajpe cannot continue "
                            "its positions; start generation from the patched model (or pass no cache)"
                        )
                    memory = DecodingMemory(torch.full((b,), past_len, dtype=torch.int64, device=device), None, None)
                else:
                    self._check_memory(memory, b)
        if n == 0:
            raise ValueError("the input has no tokens (sequence length 0); give at least one token per sequence")
        limit = self.plan.max_positions
        if limit is not None and past_len + n > limit:
            raise ValueError(
                f"sequence needs {past_len + n} positions but the position limit is {limit} "
                f"({self.describe()}); patch with a larger max_positions (rope, alibi, sinusoidal or none "
                "have no limit of their own and can run past a learned table)"
            )
        mask = None
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise NotImplementedError(
                    "hf_trajpe patched models take a 2D attention_mask [batch, seq] (1 = real token), from which "
                    f"they place each real token; got shape {tuple(attention_mask.shape)} (custom 4D masks "
                    "are not supported: pass the padding mask)"
                )
            mask = attention_mask[:, -n:].to(device)
        if position_ids is not None:
            check_position_ids(position_ids, mask, memory, b, n, device)
        if mask is not None and b > 1 and not self.batch_scaling_noted:
            self._note_batch_scaling(mask, past_len + n)
        positions, num_real, past = self.source(self, embeddings, input_ids, mask, memory, use_cache,
                                                embedding_weight)
        if self.position_skips is not None:
            positions = positions + self._skips(b, n, memory, positions)
        key_positions = None
        if self.keeps_key_positions:
            key_positions = positions
            if memory is not None:
                key_positions = torch.cat((memory.key_positions, positions), dim=1)
        prepare = (self.cache_layers and past_key_values is not None and (memory is None or memory.prepared)
                   and prepare_cache(self, past_key_values))  # (memory is None: nothing cached yet)
        units = self._read_units(input_ids, mask, memory, b, n, device)
        self.step = Step(positions, key_positions, memory.num_real if memory is not None else None,
                         past_key_values if prepare else None)
        if use_cache:
            mine = self.describe()
            self.pending = DecodingMemory(num_real, key_positions, past, mine if prepare else None, units, mine)
        else:
            self.pending = None
        if past_key_values is not None and memory is not None and memory.filled_by is not None:
            claim_cache(past_key_values, self)  # (this patch reads it now: the cache's update lets it through)

    def _read_units(self, input_ids, mask, memory: DecodingMemory | None, b: int, n: int, device) -> object | None:
        """For a scheme that reads token ids (``Scheme.read_units``): hand it this forward's, after what the KV
        cache kept of the earlier ones; returns what the cache keeps next."""
        if not self.reads_token_ids:
            return None
        if input_ids is None:
            raise ValueError(f"{self.plan.scheme} reads the token ids (its units end at boundary tokens); call the "
                             "model with input_ids, not inputs_embeds")
        past_real = memory.num_real if memory is not None else None
        rank, real = real_ranks(mask, past_real, b, n, device)
        return self.scheme.read_units(memory.units if memory is not None else None, input_ids.to(device), rank, real)

    def _check_memory(self, memory: DecodingMemory, b: int) -> None:
        """Refuse a KV cache this patch cannot continue: filled by another patch (its positions, and a remap's keys
        rotated at that remap's positions, are another's), cropped where the positions cannot follow, or of
        another batch size."""
        mine = self.describe()
        if memory.filled_by is not None and memory.filled_by != mine:
            rotated = " and its keys rotated for it" if memory.prepared else ""
            raise RuntimeError(
                f"this KV cache was filled by a model patched with {memory.filled_by} (it holds that patch's "
                f"positions{rotated}), not with {mine}; start generation again from this patched model, or pass "
                "no cache")
        if memory.stale is not None:
            raise RuntimeError(
                f"this KV cache was cropped (cache.crop: assisted generation, prompt lookup, or by hand) after "
                f"{mine} filled it, and its {memory.stale} depend on every earlier token, so they cannot be taken "
                "back; generate again from the prompt (without assistant_model or prompt_lookup_num_tokens)")
        if memory.num_real.shape[0] != b:
            raise RuntimeError(
                f"the KV cache holds hf_trajpe positions for batch {memory.num_real.shape[0]}, the input has batch "
                f"{b}; select or repeat the cache's rows with its own methods, which carry the positions along: "
                "for k beams or sequences per prompt from a prefilled cache, cache.batch_repeat_interleave(k) "
                "before generate() (which does not expand a prefilled cache, for transformers' own models either), "
                "else cache.batch_select_indices(rows)")

    def _skips(self, b: int, n: int, memory, positions: torch.Tensor) -> torch.Tensor:
        """The PoSE skips of this forward, checked: training windows only, one skip per token."""
        skips = self.position_skips
        if memory is not None:
            raise ValueError("position skips (PoSE) apply to training windows, not to a forward after a KV cache; "
                             "clear them (PatchState.position_skips = None) before generating")
        if tuple(skips.shape) != (b, n):
            raise ValueError(f"position skips (PoSE) must be [batch, seq] = {(b, n)}, got {tuple(skips.shape)}")
        return skips.to(device=positions.device, dtype=positions.dtype)

    def _note_batch_scaling(self, mask: torch.Tensor, length: int) -> None:
        """Dynamic NTK and LongRoPE pick their frequencies from the length of the whole batch: in a padded batch
        past the trained length, a short row gets the long row's frequencies and differs from the same row
        alone (about 6e-4 dynamic, 4e-3 LongRoPE in the logits), as in transformers' own models. Said once."""
        scaling = self.plan.rope_scaling
        if scaling is None or not scaling.dynamic:
            return
        trained = scaling.parameters.get("original_max_position_embeddings") or scaling.max_position_embeddings
        if length <= trained or bool(mask.bool().all()):  # (one host sync, until said)
            return
        self.batch_scaling_noted = True
        warnings.warn(
            f"hf_trajpe: {self.describe()}: rope_type {scaling.parameters['rope_type']!r} sets its frequencies "
            "from the length of the whole batch, so past the trained length a padded row gets the longest row's "
            "frequencies and differs slightly from the same row run alone (as in transformers' own models; "
            "docs/guarantees.md). Run rows one at a time, or batch rows of one length, where that matters. "
            "Shown once.", UserWarning, stacklevel=4)

    # -- what the replacement modules read -----------------------------------------------------------
    def additive(self, like: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        """The scheme's vectors ``[b, n, d]`` for this forward, in ``like``'s dtype (zeros ``[1, 1, d]``
        when the scheme adds nothing to the embeddings)."""
        if self.contributes != "additive":
            return like.new_zeros(1, 1, like.shape[-1])
        return self.scheme.additive(self.step.positions, table).to(like.dtype)


class PatchStates(nn.ModuleList):
    """The states of a model carrying several patches on disjoint layers, as ``model.hf_trajpe`` (keys
    ``<i>.<name>``, ``i`` the patch's place in the model's installation)."""

    def describe(self) -> str:
        return "; ".join(state.describe() for state in self)
