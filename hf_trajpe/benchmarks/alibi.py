"""ALiBi at long context (4,096 tokens) against the stock model's causal SDPA, time and memory.

The small Llama (RoPE, causal SDPA: the fused causal kernel, no mask materialised) against itself
patched to ALiBi, whose bias ``[b, h, n, n]`` goes to SDPA as a float mask (TRAPS.md: the causal
fast path is lost). Forward time is measured side by side; peak memory (see memory.py) of a
forward and of a training step (forward with LM loss + backward).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .memory import peak_step_bytes, state_bytes
from .models import describe_model
from .setup import Size, build_model, patched, random_ids
from .timing import side_by_side, wall

__all__ = ["bench_alibi"]


def bench_alibi(
    size: Size,
    variants: Sequence[str] = ("alibi", "trajectory/alibi"),
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    repeats: int | None = None,
    train_memory: bool = True,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Forward time ratios and peak-memory ratios of ``variants`` against stock at ``size.alibi_tokens``."""
    repeats = repeats or size.repeats["alibi"]
    n = size.alibi_tokens
    model = build_model("llama", size, device, dtype, max_positions=n)
    ids = random_ids(model.config.vocab_size, n, device=device)
    context = patched(model)

    def forward() -> None:
        model.eval()
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)

    def train_step() -> None:
        model.train()
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

    progress(f"alibi: llama at {n} tokens, forward, {len(variants)} variants x {repeats} paired rounds")
    timing = side_by_side(lambda: {"seconds": wall(forward, device)}, list(variants), context, repeats,
                          warmup=1, progress=lambda s: progress(f"alibi: forward {s}"))
    progress("alibi: peak memory" + (" (forward, training step)" if train_memory else " (forward)"))
    steps = {"forward": forward, **({"train_step": train_step} if train_memory else {})}
    memory: dict[str, dict[str, object]] = {}
    for what, fn in steps.items():
        rows: dict[str, object] = {}
        for label in (None, *variants):
            with context(label):
                model.zero_grad(set_to_none=True)
                base = state_bytes(model)
                forward()  # warm-up: first-call allocations are not the encoding's
                peak = peak_step_bytes(fn, device)
            model.zero_grad(set_to_none=True)
            rows[label or "stock"] = {"step_peak_bytes": peak, "total_peak_bytes": base + peak}
        stock = rows["stock"]
        for label in variants:
            r = rows[label]
            r["step_ratio"] = r["step_peak_bytes"] / stock["step_peak_bytes"]
            r["total_ratio"] = r["total_peak_bytes"] / stock["total_peak_bytes"]
        memory[what] = rows
    return {"tokens": n, "batch": 1, "repeats": repeats, "config": describe_model(model), "forward": timing,
            "memory": memory}
