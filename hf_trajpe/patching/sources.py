"""Position sources: where the positions of a forward come from, whatever scheme reads them.

- :class:`RankPositions`: integer positions, the rank of each real token (so padding never moves a
  real token), continuing after the tokens already in the KV cache.
- :class:`TrajectoryPositions`: content-dependent fractional positions (docs/spec.md, section 2),
  continuing from the cached trajectory; they feed any scheme that reads fractional positions.

Both return ``(positions [b, n] float32, real tokens seen per row [b] or None, trajectory past or None)``.
"""

from __future__ import annotations

import torch

from ..cache import DisplacementCache, embedding_version
from ..encodings.trajectory import TrajectoryPast, extend_positions, trajectory_positions
from ..strength import AutoStrength
from .types import DecodingMemoryView, PositionState

__all__ = ["RankPositions", "TrajectoryPositions", "real_ranks"]


def real_ranks(mask: torch.Tensor | None, past_real: torch.Tensor | None, b: int, n: int,
               device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ranks [b, n] int64, real [b, n] bool)``: the rank of each real token among the real tokens of its row,
    continuing after the ``past_real`` tokens of the KV cache (``None``: none); pad tokens 0."""
    real = torch.ones(b, n, dtype=torch.bool, device=device) if mask is None else mask.bool()
    rank = real.to(torch.int64).cumsum(dim=1) - 1
    if past_real is not None:
        rank = rank + past_real.to(device)[:, None]
    return torch.where(real, rank, 0), real


class RankPositions:
    """Integer positions: ranks of the real tokens."""

    def __call__(self, state: PositionState, embeddings: torch.Tensor, input_ids, mask,
                 memory: DecodingMemoryView | None,
                 use_cache: bool, embedding_weight) -> tuple[torch.Tensor, torch.Tensor, None]:
        b, n = embeddings.shape[:2]
        device = embeddings.device
        if memory is not None and n == 1:  # a decoding step: the same values in a third of the tensor ops
            before = memory.num_real.to(device)
            if mask is None:
                return before.to(torch.float32)[:, None], before + 1, None
            real = mask[:, 0].bool()
            return torch.where(real, before, 0).to(torch.float32)[:, None], before + real, None
        past_real = memory.num_real if memory is not None else None
        rank, real = real_ranks(mask, past_real, b, n, device)
        positions = rank.to(torch.float32)
        num_real = real.sum(dim=1) + (past_real.to(device) if past_real is not None else 0)
        return positions, num_real, None


class TrajectoryPositions:
    """Trajectory positions from the token embeddings, with the plan's strength, beta and limit.

    ``strength="auto"`` needs texts: given per call (``PatchHandle.texts``) or decoded from ``input_ids``
    with a tokenizer (``PatchHandle.set_tokenizer``). A decoding step (one new token after a cache)
    keeps the strength of its prompt: one token says nothing about the content.
    """

    def __init__(self, cache: DisplacementCache | None) -> None:
        self.displacement_cache = cache
        #: the last auto strength, reused by decoding steps
        self.auto_alpha: torch.Tensor | None = None

    def __call__(self, state: PositionState, embeddings: torch.Tensor, input_ids, mask,
                 memory: DecodingMemoryView | None,
                 use_cache: bool, embedding_weight) -> tuple[torch.Tensor, torch.Tensor | None, TrajectoryPast | None]:
        alpha = self._alpha(state, embeddings.shape[0], input_ids, memory)
        kwargs = state.trajectory_options()
        extend = state.extension()
        if (
            self.displacement_cache is not None
            and memory is None
            and (not use_cache or not state.keeps_full_state())  # a causal model decoding next needs the full state
            and input_ids is not None
            and not (torch.is_tensor(alpha) and alpha.requires_grad)
        ):
            version = embedding_version(embedding_weight) if embedding_weight is not None else None
            positions = self.displacement_cache.positions(input_ids, embeddings, mask, alpha, version=version,
                                                          **kwargs)
            if extend is not None:
                positions, _ = extend_positions(positions, mask, extend)
            return self._clamp(state, positions), None, None
        before = memory.trajectory if memory is not None else None
        positions, past = trajectory_positions(embeddings, mask, alpha, past=before, return_past=True, **kwargs)
        if extend is not None:  # the running sum continues from the cache, like the trajectory itself
            positions, past.extension_sum = extend_positions(
                positions, mask, extend, before.num_real if before is not None else None,
                before.extension_sum if before is not None else None)
        return self._clamp(state, positions), past.num_real, past

    @staticmethod
    def _clamp(state: PositionState, positions: torch.Tensor) -> torch.Tensor:
        """Positions past the plan's limit stop at its last position; the state counts and reports them.
        (Clamped here, not inside ``trajectory_positions``, so the count reaches the state.)"""
        limit = state.position_limit()
        if limit is None:
            return positions
        over = positions > limit - 1  # pads are at 0
        count = int(over.sum())  # one host sync per forward, only where a limit exists
        if count:
            state.report_clamped(count)
            positions = positions.clamp(max=limit - 1)
        return positions

    def _alpha(self, state: PositionState, b: int, input_ids, memory) -> torch.Tensor:
        strength = state.strength
        texts = state.call_texts
        if isinstance(strength, AutoStrength) and texts is None:
            if memory is not None and self.auto_alpha is not None and self.auto_alpha.numel() in (1, b):
                return self.auto_alpha  # a decoding step keeps its prompt's strength
            if state.tokenizer is not None and input_ids is not None:
                texts = state.tokenizer.batch_decode(input_ids, skip_special_tokens=True)
        alpha = strength(b, texts)
        if isinstance(strength, AutoStrength):
            self.auto_alpha = alpha
        return alpha
