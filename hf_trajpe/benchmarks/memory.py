"""Peak memory of a forward+backward training step, patched against stock.

How it is measured (deterministic, so one run per variant suffices):

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; the step's peak is
  the maximum minus what was allocated before the step (weights, inputs).
- CPU: torch keeps no allocator statistics, so the step runs once under ``torch.profiler`` with
  ``profile_memory=True``; every allocation and free of the CPU allocator is an event with a signed
  byte count, and the running sum over time gives the step's peak. Weights and other tensors that
  exist before the step are added as the bytes of the model's parameter and buffer storages.

Both count tensor memory only (what the allocator hands out), not the Python process, the CUDA
context or allocator caching, so the ratio isolates what a patch adds. Peak RSS would bury it under
hundreds of MB of interpreter and libraries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .setup import MODELS, Size, build_model, encodings_for, patched, random_ids

__all__ = ["bench_memory", "peak_step_bytes", "state_bytes"]


def state_bytes(module: torch.nn.Module) -> int:
    """Bytes of the distinct storages of parameters, buffers and existing gradients."""
    seen: dict[int, int] = {}
    for t in list(module.parameters()) + list(module.buffers()):
        for x in (t, t.grad):
            if x is not None:
                st = x.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _cpu_peak(fn: Callable[[], object]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return peak


def peak_step_bytes(fn: Callable[[], object], device: str = "cpu") -> int:
    """Peak bytes allocated by ``fn()`` above what was allocated before it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    if torch.device(device).type != "cpu":
        raise ValueError(f"peak memory is measured on cpu or cuda only, got device {device!r}")
    return _cpu_peak(fn)


def bench_memory(
    size: Size,
    families: Sequence[str] = MODELS,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Per model: peak bytes of a training step (forward with LM loss + backward) per encoding."""
    out: dict[str, object] = {"tokens": size.tokens, "batch": 1, "models": {}}
    for family in families:
        model = build_model(family, size, device, dtype)
        ids = random_ids(model.config.vocab_size, size.tokens, device=device)
        context = patched(model)

        def step(model=model, ids=ids) -> None:
            model.train()
            model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

        def measure(label: str | None, model=model, step=step, context=context) -> dict[str, int]:
            with context(label):
                model.zero_grad(set_to_none=True)
                base = state_bytes(model)
                peak = peak_step_bytes(step, device)
            model.zero_grad(set_to_none=True)
            return {"state_bytes": base, "step_peak_bytes": peak, "total_peak_bytes": base + peak}

        progress(f"memory: {family}, training step, stock + {len(encodings_for(family))} encodings")
        step()  # warm-up: one-time allocations are not the patch's
        model.zero_grad(set_to_none=True)
        stock = measure(None)
        rows = {}
        for label in encodings_for(family):
            m = measure(label)
            rows[label] = dict(m, step_ratio=m["step_peak_bytes"] / stock["step_peak_bytes"],
                               total_ratio=m["total_peak_bytes"] / stock["total_peak_bytes"])
        out["models"][family] = {"stock": stock, "variants": rows}
        del model
    return out
