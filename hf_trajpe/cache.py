"""Optional displacement cache (docs/spec.md, section 2): adapted positions keyed by token ids.

A sequence's positions depend only on its token ids (through the embedding table), the strength,
beta and the position limit, so repeated sequences (evaluation sweeps, prompt reuse) need not be
recomputed. The key also holds ``version``, which callers set from the embedding weights (see
:func:`embedding_version`) so an optimizer step invalidates every entry. The cache is bypassed
whenever gradients must flow into the embeddings: a cached tensor has no graph. It never changes
results, only skips work.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import torch

from .encodings.trajectory import strength_tensor, trajectory_positions
from .monitoring import TrajectoryMonitor, global_monitor

__all__ = ["DisplacementCache", "embedding_version"]


def embedding_version(weight: torch.Tensor) -> tuple[int, int]:
    """Identity plus in-place version counter of a weight: changes whenever the optimizer steps."""
    return (weight.data_ptr(), weight._version)


class DisplacementCache:
    """Bounded LRU map from a sequence's real token ids to its adapted positions."""

    def __init__(self, max_entries: int = 10_000) -> None:
        if not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive integer, got {max_entries!r}")
        self.max_entries = max_entries
        self._data: OrderedDict[Hashable, torch.Tensor] = OrderedDict()
        self.hits = 0
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    def clear(self) -> None:
        self._data.clear()

    def positions(
        self,
        input_ids: torch.Tensor,
        embeddings: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        strength: float | torch.Tensor = 0.2,
        beta: float = 2.0,
        max_positions: int | None = None,
        *,
        version: Hashable = None,
        detach: bool = False,
        monitor: TrajectoryMonitor | None = None,
    ) -> torch.Tensor:
        """Same result as :func:`trajectory_positions`; ``input_ids``: ``[b, n]``."""
        kwargs = dict(beta=beta, max_positions=max_positions, detach=detach, monitor=monitor)
        if embeddings.requires_grad and torch.is_grad_enabled() and not detach:
            return trajectory_positions(embeddings, attention_mask, strength, **kwargs)
        b, n = input_ids.shape
        real = (
            torch.ones(b, n, dtype=torch.bool, device=input_ids.device)
            if attention_mask is None
            else attention_mask.bool()
        )
        alphas = strength_tensor(strength, b, embeddings.device)[:, 0].tolist()
        ids_cpu, real_cpu = input_ids.cpu(), real.cpu()
        keys = [
            (ids_cpu[r][real_cpu[r]].numpy().tobytes(), alphas[r], float(beta), max_positions, version)
            for r in range(b)
        ]
        found = [self._data.get(k) for k in keys]
        miss = [r for r, v in enumerate(found) if v is None]
        hits = b - len(miss)
        self.hits += hits
        self.lookups += b
        mon = monitor if monitor is not None else global_monitor.if_enabled()
        if mon is not None:
            mon.record_cache(hits, b)
        if miss:
            rows = torch.tensor(miss, device=embeddings.device)
            sub_mask = None if attention_mask is None else attention_mask.index_select(0, rows)
            sub_alpha = torch.tensor([alphas[r] for r in miss], device=embeddings.device)
            computed = trajectory_positions(embeddings.index_select(0, rows), sub_mask, sub_alpha, **kwargs)
            for i, r in enumerate(miss):
                found[r] = computed[i][real[r]].detach()
                self._store(keys[r], found[r])
        for k in keys:
            if k in self._data:
                self._data.move_to_end(k)
        out = torch.zeros(b, n, dtype=torch.float32, device=embeddings.device)
        out[real] = torch.cat([v.to(out.device) for v in found]) if b else out[real]
        return out

    def _store(self, key: Hashable, value: torch.Tensor) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)
