"""Peak memory of a forward+backward training step, patched against stock.

How it is measured (deterministic, so one run per variant suffices):

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; the step's peak is the
  maximum minus what was allocated just before the step (weights, inputs, anything left over).
- CPU: torch keeps no allocator statistics, so the whole benchmark of one model (building it
  included) runs inside one ``torch.profiler`` session with ``profile_memory=True``: every allocation
  and free of the CPU allocator is an event with a signed byte count, and each step is a window
  marked with ``record_function``. A step's peak is the highest running sum inside its window minus
  the sum at its start. One session matters: the profiler only knows the size of blocks allocated
  while it records, so frees of older blocks would be missed or, across sessions, misattributed.

Both count tensor memory only (what the allocator hands out), not the Python process, the CUDA
context or allocator caching, so the ratio isolates what a patch adds; peak RSS would bury it under
hundreds of MB of interpreter and libraries. "Total" adds the bytes of the model's parameters and
buffers (and any gradients) present before the step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch

from .setup import MODELS, Size, build_model, encodings_for, patched, random_ids

__all__ = ["PeakMemory", "bench_memory", "state_bytes"]

_WINDOW = "hf_trajpe_memory_window:"


def state_bytes(module: torch.nn.Module) -> int:
    """Bytes of the distinct storages of parameters, buffers and existing gradients."""
    seen: dict[int, int] = {}
    for t in list(module.parameters()) + list(module.buffers()):
        for x in (t, t.grad):
            if x is not None:
                st = x.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


class PeakMemory:
    """``with PeakMemory(device) as pm:`` then ``with pm.measure("name"): step()``; after the outer
    block ``pm.peaks["name"]`` holds the bytes allocated at the step's peak above its start."""

    def __init__(self, device: str = "cpu") -> None:
        kind = torch.device(device).type
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"peak memory is measured on cpu or cuda only, got device {device!r}")
        self.device, self.cuda = device, kind == "cuda"
        self.peaks: dict[str, int] = {}
        self._prof = None

    def __enter__(self) -> PeakMemory:
        if not self.cuda:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()
        return self

    @contextlib.contextmanager
    def measure(self, name: str) -> Iterator[None]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            before = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            yield
            torch.cuda.synchronize(self.device)
            self.peaks[name] = torch.cuda.max_memory_allocated(self.device) - before
            return
        with torch.profiler.record_function(_WINDOW + name):
            yield

    def __exit__(self, *exc) -> None:
        if self._prof is None:
            return
        self._prof.__exit__(*exc)
        if exc[0] is not None:
            return
        events = self._prof.profiler.kineto_results.events()
        windows = [(e.name()[len(_WINDOW):], e.start_ns(), e.end_ns()) for e in events
                   if e.name().startswith(_WINDOW)]
        memory = sorted((e.start_ns(), e.nbytes()) for e in events
                        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
        for name, start, end in windows:
            current = peak = 0
            for t, nbytes in memory:
                if t < start:
                    continue
                if t > end:
                    break
                current += nbytes
                peak = max(peak, current)
            self.peaks[name] = peak


def bench_memory(
    size: Size,
    families: Sequence[str] = MODELS,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Per model: peak bytes of a training step (forward with LM loss + backward) per encoding."""
    out: dict[str, object] = {"tokens": size.tokens, "batch": 1, "method": _method(device), "models": {}}
    for family in families:
        labels = encodings_for(family)
        progress(f"memory: {family}, training step, stock + {len(labels)} encodings")
        with PeakMemory(device) as pm:
            model = build_model(family, size, device, dtype)
            ids = random_ids(model.config.vocab_size, size.tokens, device=device)
            context = patched(model)

            def step(model=model, ids=ids) -> None:
                model.train()
                model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

            base: dict[str, int] = {}
            for label in (None, *labels):
                with context(label):  # a fresh patch: nothing left over from an earlier forward
                    model.zero_grad(set_to_none=True)
                    if label is None:
                        step()  # warm-up: one-time allocations are not the patch's
                        model.zero_grad(set_to_none=True)
                    base[label or "stock"] = state_bytes(model)
                    with pm.measure(label or "stock"):
                        step()
                model.zero_grad(set_to_none=True)
            del model
        out["models"][family] = _rows(base, pm.peaks, labels)
    return out


def _rows(base: dict[str, int], peaks: dict[str, int], labels: Sequence[str]) -> dict[str, object]:
    """Stock and per-label peaks with ratios against stock."""
    def row(name: str) -> dict[str, float]:
        return {"state_bytes": base[name], "step_peak_bytes": peaks[name],
                "total_peak_bytes": base[name] + peaks[name]}

    stock = row("stock")
    rows = {}
    for label in labels:
        r = row(label)
        r["step_ratio"] = r["step_peak_bytes"] / stock["step_peak_bytes"]
        r["total_ratio"] = r["total_peak_bytes"] / stock["total_peak_bytes"]
        rows[label] = r
    return {"stock": stock, "variants": rows}


def _method(device: str) -> str:
    if torch.device(device).type == "cuda":
        return "torch.cuda.max_memory_allocated (peak above the bytes allocated before the step)"
    return "torch.profiler CPU allocator events, one session per model (peak above the start of the step)"
