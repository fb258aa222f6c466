"""The remap encodings (Self-Extend, ReRoPE, dual chunk attention, STRING) reading past the trained length,
against the stock model: prefill time, decoding time per token and peak memory of the prefill, side by side
in one run.

The small Llama (trained length 4,096 at the default size) reads ``size.remap_tokens`` tokens (16,384: four
times its trained length) and then decodes ``size.decode_new`` tokens greedily with the KV cache, with each
method at its defaults (docs/patching.md, "Remapped relative positions"); stock is the same model with plain
RoPE and SDPA's fused causal kernel. One ``generate()`` call per measurement gives both times: the prefill is
the time until the first token's logits are ready, a decoding step the spacing of the later ones
(decode.StepClock). Peak memory is that of the prefill forward as ``generate()`` runs it (with the KV cache,
logits of the last token only), measured as in memory.py.

Each ratio is held against a limit (:data:`LIMITS`): the patched prefill and decoding step at most 2.5x and
1.2x the stock ones (a remap scores some pairs twice where its regions meet and merges its regions' scores;
the KV cache of Self-Extend and ReRoPE holds the keys twice), the prefill's peak memory at most 1.5x. The
verdicts read the intervals as the targets of the other benchmarks do (intervals.verdict).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch

from ..compat import cache_kwarg
from .decode import StepClock
from .intervals import verdict
from .memory import PeakMemory, _method, _rows, state_bytes
from .models import describe_model
from .setup import Rounds, Size, build_model, random_ids, rounds_for
from .timing import side_by_side, stopwatch

__all__ = ["LIMITS", "REMAPS", "bench_remap"]

#: label -> (encoding, options): every remap at its defaults
REMAPS: dict[str, tuple[str, dict]] = {name: (name, {}) for name in ("self_extend", "rerope", "dca", "string")}
#: figure -> the most a remap may cost against stock (paired ratio; memory: the ratio of the prefill's peak)
LIMITS: dict[str, float] = {"prefill_s": 2.5, "per_token_s": 1.2, "memory": 1.5}


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


def _verdicts(timing: dict, memory: dict, variants: Sequence[str]) -> dict[str, dict[str, str]]:
    """Per variant and figure, met / missed / unresolved against :data:`LIMITS`."""
    out: dict[str, dict[str, str]] = {}
    for label in variants:
        figs = timing["variants"][label]
        out[label] = {key: verdict({"point": figs[key]["paired_ratio"], "low": figs[key]["interval"][0],
                                    "high": figs[key]["interval"][1], "rounds": figs[key]["rounds"]}, LIMITS[key])
                      for key in ("prefill_s", "per_token_s")}
        out[label]["memory"] = "met" if memory["variants"][label]["step_ratio"] <= LIMITS["memory"] else "missed"
    return out


def bench_remap(
    size: Size,
    variants: Sequence[str] = tuple(REMAPS),
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    rounds: Rounds | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Prefill and per-token decoding time ratios and prefill peak-memory ratios of ``variants`` against stock
    at ``size.remap_tokens`` (then ``size.decode_new`` new tokens), with their verdicts against :data:`LIMITS`."""
    from transformers import GenerationConfig, LogitsProcessorList

    rounds = rounds or rounds_for(size, "remap")
    n, new = size.remap_tokens, size.decode_new
    variants = list(variants)
    progress(f"remap: peak memory (prefill of {n} tokens)")
    with PeakMemory(device) as pm:
        model = build_model("llama", size, device, dtype)  # its trained length stays: the remaps read past it
        ids = random_ids(model.config.vocab_size, n, device=device)
        context = _context(model)

        def prefill() -> None:
            from transformers import DynamicCache

            with torch.no_grad():  # an empty cache object, as generate() passes: a remap's cache then holds its
                # keys rotated (once per key rotation: Self-Extend and ReRoPE twice), as in generate()
                model(input_ids=ids, use_cache=True, logits_to_keep=1,
                      **{cache_kwarg(): DynamicCache(config=model.config)})

        prefill()  # warm-up: one-time allocations are not the patch's
        base: dict[str, int] = {}
        for label in (None, *variants):
            with context(label):
                base[label or "stock"] = state_bytes(model)
                with pm.measure(label or "stock"):
                    prefill()
    gen = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                           pad_token_id=model.config.pad_token_id, eos_token_id=model.config.eos_token_id)

    def measure() -> dict[str, float]:
        steps = StepClock(device, rounds.clock)
        with torch.no_grad(), stopwatch(device, rounds.clock) as t:
            start = steps.timer()
            out = model.generate(ids, generation_config=gen, logits_processor=LogitsProcessorList([steps]))
        if out.shape[1] != n + new:
            raise RuntimeError(f"generate() made {out.shape[1] - n} tokens, expected {new}")
        return {"prefill_s": steps.stamps[0] - start, "per_token_s": steps.per_token(), "generate_s": t[0]}

    progress(f"remap: llama at {n} tokens + {new} decoded, {len(variants)} variants x "
             f"{rounds.repeats}-{rounds.max_rounds} paired rounds")
    timing = side_by_side(measure, variants, context, warmup=1, progress=lambda s: progress(f"remap: {s}"),
                          watch=["prefill_s", "per_token_s"], **rounds.side_by_side())
    memory = _rows(base, pm.peaks, variants)
    return {"tokens": n, "new_tokens": new, "batch": 1, "trained_length": int(model.config.max_position_embeddings),
            **rounds.describe(), "config": describe_model(model), "read": timing, "memory": {"prefill": memory},
            "memory_method": _method(device), "limits": dict(LIMITS),
            "verdicts": _verdicts(timing, memory, variants)}
