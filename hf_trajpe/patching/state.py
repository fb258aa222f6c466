"""``PatchState``: what a patched model carries between its hooks, replacement modules and attention
functions, attached to the model as ``model.hf_trajpe``.

It holds the plan's scheme (an ``nn.Module``), the strength (so a learnable one trains, moves with
``.to()`` and is saved), the position source, and the positions of the current forward. Per forward:
the pre-hook calls :meth:`PatchState.begin_forward`; the replacement modules and attention functions
read :attr:`PatchState.step`; the post-hook stores :attr:`PatchState.pending` on the KV cache.

Shape legend: ``b`` batch, ``n`` new tokens, ``t`` all key positions (cache + new), ``d`` width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..cache import DisplacementCache
from ..encodings.trajectory import TrajectoryPast
from .plan import PatchPlan, plan_strength
from .schemes import get_scheme
from .sources import RankPositions, TrajectoryPositions

__all__ = ["DecodingMemory", "PatchState", "Step", "MEMORY_ATTR", "STATE_ATTR", "bind_state"]

#: attribute of the KV cache object that holds :class:`DecodingMemory`
MEMORY_ATTR = "_hf_trajpe_memory"
#: attribute (in ``__dict__``, not a submodule) by which patched modules find the state
STATE_ATTR = "_hf_trajpe_state"


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

    def reorder(self, idx: torch.Tensor) -> DecodingMemory:
        """Select rows, as beam search reorders its cache."""
        return DecodingMemory(
            self.num_real.index_select(0, idx),
            None if self.key_positions is None else self.key_positions.index_select(0, idx),
            None if self.trajectory is None else self.trajectory.reorder(idx),
        )


class Step:
    """Positions of one forward plus lazily built tensors shared by all layers (``memo``)."""

    def __init__(self, positions: torch.Tensor, key_positions: torch.Tensor | None) -> None:
        self.positions = positions  # [b, n] float32; pad tokens 0
        self.key_positions = key_positions  # [b, t] or None
        self.memo: dict = {}


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

    @property
    def displacement_cache(self) -> DisplacementCache | None:
        return getattr(self.source, "displacement_cache", None)

    @property
    def _auto_alpha(self) -> torch.Tensor | None:
        """The last strength picked by ``strength="auto"``."""
        return getattr(self.source, "auto_alpha", None)

    def describe(self) -> str:
        return self.plan.describe()

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
    ) -> None:
        """Compute the positions of this forward (``embeddings``: token embeddings ``[b, n, d]``;
        ``embedding_weight``: the token embedding matrix, whose version keys the displacement cache)."""
        b, n = embeddings.shape[:2]
        device = embeddings.device
        past_len = 0
        memory = None
        if past_key_values is not None and hasattr(past_key_values, "get_seq_length"):
            past_len = int(past_key_values.get_seq_length())
            if past_len:
                memory = past_key_values.__dict__.get(MEMORY_ATTR)
                if memory is None:
                    if self.plan.trajectory or self.plan.uses_attention:
                        raise RuntimeError(
                            "this KV cache was not produced by the patched model, so hf_trajpe cannot continue "
                            "its positions; start generation from the patched model (or pass no cache)"
                        )
                    memory = DecodingMemory(torch.full((b,), past_len, dtype=torch.int64, device=device), None, None)
                elif memory.num_real.shape[0] != b:
                    raise RuntimeError(
                        f"the KV cache holds hf_trajpe state for batch {memory.num_real.shape[0]}, the input has "
                        f"batch {b}; expand or select the cache rows with the model's own generate()"
                    )
        limit = self.plan.hard_limit
        if limit is not None and past_len + n > limit:
            raise ValueError(
                f"sequence needs {past_len + n} positions but the position limit is {limit} "
                f"({self.describe()}); patch with a larger max_positions (rope, alibi, sinusoidal or none "
                "can run past a learned table)"
            )
        mask = None
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise NotImplementedError(
                    "hf_trajpe patched models take a 2D attention_mask [batch, seq] (1 = real token); "
                    f"got shape {tuple(attention_mask.shape)}"
                )
            mask = attention_mask[:, -n:].to(device)
        positions, num_real, past = self.source(self, embeddings, input_ids, mask, memory, use_cache,
                                                embedding_weight)
        key_positions = None
        if self.plan.key_positions:
            key_positions = positions
            if memory is not None:
                key_positions = torch.cat((memory.key_positions, positions), dim=1)
        self.step = Step(positions, key_positions)
        self.pending = DecodingMemory(num_real, key_positions, past) if use_cache else None

    # -- what the replacement modules read -----------------------------------------------------------
    def additive(self, like: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        """The scheme's vectors ``[b, n, d]`` for this forward, in ``like``'s dtype (zeros ``[1, 1, d]``
        when the scheme adds nothing to the embeddings)."""
        if self.scheme.contributes != "additive":
            return like.new_zeros(1, 1, like.shape[-1])
        return self.scheme.additive(self.step.positions, table).to(like.dtype)
