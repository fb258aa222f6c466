"""Counters of docs/spec.md, section 5, readable as a dict and loggable to any accelerate tracker.

Per-call statistics stay on the device as tensors (no host sync in the hot path); ``as_dict()``
reads them once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["TrajectoryMonitor", "global_monitor", "enable_global_monitor"]


class TrajectoryMonitor:
    """Accumulates fallbacks, cache hits, timing and displacement statistics.

    Keys of :meth:`as_dict`: ``calls``, ``tokens``, ``fallback_sequences``, ``cache_hits``,
    ``cache_lookups``, ``cache_hit_rate``, ``encode_seconds``, ``encode_seconds_per_call``,
    ``tokens_per_second``, ``displacement_mean``, ``displacement_max``, ``clamped_share``,
    ``smoothness`` (mean |second difference| of positions over consecutive real tokens), ``steps`` (pairs of
    consecutive real tokens), ``step_mean`` and ``step_cv`` (mean of the step ``p_i - p_{i-1}`` over those
    pairs and its coefficient of variation: near 0, the positions are a rescaled index).
    """

    def __init__(self) -> None:
        #: only the process-wide ``global_monitor`` is ever disabled (it records nothing until enabled)
        self.enabled = True
        self.reset()

    def if_enabled(self) -> TrajectoryMonitor | None:
        return self if self.enabled else None

    def reset(self) -> None:
        self.calls = 0
        self.fallback_sequences = 0
        self.cache_hits = 0
        self.cache_lookups = 0
        self.encode_seconds = 0.0
        self.timed_tokens = 0
        self.timed_calls = 0
        self._sums: dict[str, torch.Tensor] = {}

    # -- recording -------------------------------------------------------------------------------
    def record_fallbacks(self, n: int) -> None:
        self.fallback_sequences += int(n)

    def record_clamped(self, n: int) -> None:
        """Real tokens whose position was clamped at a limit (counted by the patch, which clamps)."""
        self._add("clamped", torch.tensor(float(n)))

    def record_cache(self, hits: int, lookups: int) -> None:
        self.cache_hits += int(hits)
        self.cache_lookups += int(lookups)

    def _add(self, key: str, value: torch.Tensor, reduce: str = "sum") -> None:
        value = value.detach().to(torch.float64)
        old = self._sums.get(key)
        if old is None:
            self._sums[key] = value
        elif reduce == "max":
            self._sums[key] = torch.maximum(old, value.to(old.device))
        else:
            self._sums[key] = old + value.to(old.device)

    def record_positions(
        self,
        positions: torch.Tensor,
        displacement: torch.Tensor,
        real: torch.Tensor,
        clamped: torch.Tensor | None = None,
    ) -> None:
        """``positions``/``displacement``/``real``/``clamped``: ``[b, n]``."""
        self.calls += 1
        realf = real.to(torch.float64)
        disp = displacement.detach().to(torch.float64) * realf
        self._add("tokens", realf.sum())
        self._add("disp_sum", disp.sum())
        self._add("disp_max", disp.max() if disp.numel() else disp.new_zeros(()), "max")
        if clamped is not None:
            self._add("clamped", clamped.to(torch.float64).sum())
        if positions.shape[1] < 2:
            return
        p = positions.detach().to(torch.float64)
        # masks are multiplied, not indexed: boolean indexing would sync with the host on every forward
        ok1 = (real[:, 1:] & real[:, :-1]).to(torch.float64)
        step = (p[:, 1:] - p[:, :-1]) * ok1
        self._add("step_sum", step.sum())
        self._add("step_sq", (step * step).sum())
        self._add("step_count", ok1.sum())
        if positions.shape[1] >= 3:
            d2 = (p[:, 2:] - 2 * p[:, 1:-1] + p[:, :-2]).abs()
            ok = (real[:, 2:] & real[:, 1:-1] & real[:, :-2]).to(torch.float64)
            self._add("smooth_sum", (d2 * ok).sum())
            self._add("smooth_count", ok.sum())

    @contextmanager
    def timed(self, tokens: int, device: torch.device | str | None = None) -> Iterator[None]:
        """Time a block of encoding work; synchronises CUDA around it so the figure is real."""
        cuda = device is not None and torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        try:
            yield
        finally:
            if cuda:
                torch.cuda.synchronize(device)
            self.encode_seconds += time.perf_counter() - start
            self.timed_tokens += int(tokens)
            self.timed_calls += 1

    # -- reading ---------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, float]:
        s = {k: float(v) for k, v in self._sums.items()}
        tokens = s.get("tokens", 0.0)
        steps = s.get("step_count", 0.0)
        step_mean = s.get("step_sum", 0.0) / steps if steps else 0.0
        step_sd = max(s.get("step_sq", 0.0) / steps - step_mean * step_mean, 0.0) ** 0.5 if steps else 0.0
        out = {
            "calls": float(self.calls),
            "tokens": tokens,
            "fallback_sequences": float(self.fallback_sequences),
            "cache_hits": float(self.cache_hits),
            "cache_lookups": float(self.cache_lookups),
            "cache_hit_rate": self.cache_hits / self.cache_lookups if self.cache_lookups else 0.0,
            "encode_seconds": self.encode_seconds,
            "encode_seconds_per_call": self.encode_seconds / self.timed_calls if self.timed_calls else 0.0,
            "tokens_per_second": self.timed_tokens / self.encode_seconds if self.encode_seconds else 0.0,
            "displacement_mean": s.get("disp_sum", 0.0) / tokens if tokens else 0.0,
            "displacement_max": s.get("disp_max", 0.0),
            "clamped_share": s.get("clamped", 0.0) / tokens if tokens else 0.0,
            "smoothness": s["smooth_sum"] / s["smooth_count"] if s.get("smooth_count") else 0.0,
            "steps": steps,
            "step_mean": step_mean,
            "step_cv": step_sd / step_mean if step_mean else 0.0,
        }
        return out


#: Counts fallbacks and cache use of calls that pass no monitor of their own, once turned on with
#: :func:`enable_global_monitor` (off by default: a process-wide counter nobody asked for is a side channel).
global_monitor = TrajectoryMonitor()
global_monitor.enabled = False


def enable_global_monitor(enabled: bool = True) -> TrajectoryMonitor:
    """Turn the process-wide monitor on (or off); returns it. Monitors attached to a patched model with
    ``handle.attach_monitor()`` record regardless."""
    global_monitor.enabled = bool(enabled)
    return global_monitor
