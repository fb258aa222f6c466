"""The remap encodings (Self-Extend, ReRoPE, dual chunk attention, STRING) reading past the trained length,
against the stock model: prefill time and peak memory of one forward, side by side in one run.

The small Llama (trained length 4,096 at the default size) reads ``size.remap_tokens`` tokens (8,192) with each
method at its defaults (docs/patching.md, "Remapped relative positions"); stock is the same model with plain
RoPE and SDPA's fused causal kernel. A remap computes its scores per region in blocks of queries
(patching/remap_attention.py), so it costs more time than the fused kernel, and its peak memory is a few
blocks of scores instead of none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch

from .memory import PeakMemory, _method, _rows, state_bytes
from .models import describe_model
from .setup import Rounds, Size, build_model, random_ids, rounds_for
from .timing import side_by_side, wall

__all__ = ["REMAPS", "bench_remap"]

#: label -> (encoding, options): every remap at its defaults
REMAPS: dict[str, tuple[str, dict]] = {name: (name, {}) for name in ("self_extend", "rerope", "dca", "string")}


def _context(model: torch.nn.Module) -> Callable[[str | None], contextlib.AbstractContextManager]:
    @contextlib.contextmanager
    def context(label: str | None) -> Iterator[None]:
        if label is None:
            yield
            return
        from ..patching import patch

        enc, opts = REMAPS[label]
        with patch(model, enc, **opts):
            yield

    return context


def bench_remap(
    size: Size,
    variants: Sequence[str] = tuple(REMAPS),
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    rounds: Rounds | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Forward (prefill) time ratios and peak-memory ratios of ``variants`` against stock at ``size.remap_tokens``."""
    rounds = rounds or rounds_for(size, "remap")
    n = size.remap_tokens
    variants = list(variants)
    progress("remap: peak memory (forward)")
    with PeakMemory(device) as pm:
        model = build_model("llama", size, device, dtype)  # its trained length stays: the remaps read past it
        ids = random_ids(model.config.vocab_size, n, device=device)
        context = _context(model)

        def forward() -> None:
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)

        forward()  # warm-up: one-time allocations are not the patch's
        base: dict[str, int] = {}
        for label in (None, *variants):
            with context(label):
                base[label or "stock"] = state_bytes(model)
                with pm.measure(label or "stock"):
                    forward()
    progress(f"remap: llama at {n} tokens, forward, {len(variants)} variants x {rounds.repeats}-{rounds.max_rounds} "
             "paired rounds")
    timing = side_by_side(lambda: {"seconds": wall(forward, device, rounds.clock)}, variants, context, warmup=1,
                          progress=lambda s: progress(f"remap: forward {s}"), **rounds.side_by_side())
    return {"tokens": n, "batch": 1, "trained_length": int(model.config.max_position_embeddings),
            **rounds.describe(), "config": describe_model(model), "forward": timing,
            "memory": {"forward": _rows(base, pm.peaks, variants)}, "memory_method": _method(device)}
