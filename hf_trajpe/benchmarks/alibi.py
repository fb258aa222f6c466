"""ALiBi at long context (4,096 tokens) against the stock model's causal SDPA, time and memory.

The small Llama (RoPE, causal SDPA: the fused causal kernel, no mask materialised) against itself
patched to ALiBi, whose bias ``[b, h, n, n]`` goes to SDPA as a float mask (docs/notes.md, section 6: the causal
fast path is lost). Forward time is measured side by side; peak memory (see memory.py) of a
forward and of a training step (forward with LM loss + backward). On CUDA each variant is also run through
FlexAttention (label suffix ``(flex)``: the bias as a compiled ``score_mod``, no mask materialised), whose
backward needs a GPU; the stock model stays on SDPA, so the ratio says what flex buys over the float mask.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch

from .memory import PeakMemory, _method, _rows, state_bytes
from .models import describe_model
from .setup import Rounds, Size, build_model, patched, random_ids, rounds_for
from .timing import side_by_side, wall

__all__ = ["FLEX", "bench_alibi", "with_flex"]

#: the suffix of a variant run through FlexAttention (CUDA only)
FLEX = " (flex)"


def with_flex(model: torch.nn.Module, context: Callable[[str | None], contextlib.AbstractContextManager]
               ) -> Callable[[str | None], contextlib.AbstractContextManager]:
    """``context`` for labels ending in :data:`FLEX`: the model runs flex_attention while patched, sdpa after."""

    @contextlib.contextmanager
    def flexed(label: str | None) -> Iterator[None]:
        if label is None or not label.endswith(FLEX):
            with context(label):
                yield
            return
        model.set_attn_implementation("flex_attention")
        try:
            with context(label[: -len(FLEX)]):
                yield
        finally:
            model.set_attn_implementation("sdpa")

    return flexed


def bench_alibi(
    size: Size,
    variants: Sequence[str] = ("alibi", "trajectory/alibi"),
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    rounds: Rounds | None = None,
    train_memory: bool = True,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Forward time ratios and peak-memory ratios of ``variants`` against stock at ``size.alibi_tokens``."""
    rounds = rounds or rounds_for(size, "alibi")
    repeats, max_rounds = rounds.repeats, rounds.max_rounds
    n = size.alibi_tokens
    variants = list(variants)
    if torch.device(device).type == "cuda":
        variants += [v + FLEX for v in variants if not v.endswith(FLEX)]
    progress("alibi: peak memory" + (" (forward, training step)" if train_memory else " (forward)"))
    with PeakMemory(device) as pm:
        model = build_model("llama", size, device, dtype, max_positions=n)
        ids = random_ids(model.config.vocab_size, n, device=device)
        context = with_flex(model, patched(model))

        def forward() -> None:
            model.eval()
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)

        def train_step() -> None:
            model.train()
            model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

        steps = {"forward": forward, **({"train_step": train_step} if train_memory else {})}
        forward()  # warm-up: one-time allocations are not the patch's
        base: dict[str, int] = {}
        for what, fn in steps.items():
            for label in (None, *variants):
                with context(label):  # a fresh patch: nothing left over from an earlier forward
                    model.zero_grad(set_to_none=True)
                    base[f"{what}/{label or 'stock'}"] = state_bytes(model)
                    with pm.measure(f"{what}/{label or 'stock'}"):
                        fn()
                model.zero_grad(set_to_none=True)
    memory = {}
    for what in steps:
        sub = lambda d, w=what: {k.split("/", 1)[1]: v for k, v in d.items() if k.startswith(w + "/")}  # noqa: E731
        memory[what] = _rows(sub(base), sub(pm.peaks), variants)
    progress(f"alibi: llama at {n} tokens, forward, {len(variants)} variants x {repeats}-{max_rounds} paired rounds")
    timing = side_by_side(lambda: {"seconds": wall(forward, device, rounds.clock)}, variants, context, warmup=1,
                          progress=lambda s: progress(f"alibi: forward {s}"), **rounds.side_by_side())
    return {"tokens": n, "batch": 1, **rounds.describe(), "config": describe_model(model), "forward": timing,
            "memory": memory, "memory_method": _method(device)}
