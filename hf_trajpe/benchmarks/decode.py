"""Greedy decoding with the KV cache (``generate()``), patched against stock.

Two figures per run: the whole ``generate()`` call (``size.decode_prompt`` prompt tokens, then
``size.decode_new`` new ones; tokens/s = new tokens / seconds) and the per-token decode time, read
by a logits processor that stamps the clock each time a token's logits are ready: the spacing of
the stamps after the first is one cached decoding step, prompt (prefill) excluded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .setup import MODELS, Rounds, Size, build_model, encodings_for, patched, random_ids, rounds_for
from .targets import limits_for
from .timing import check_clock, side_by_side, stopwatch, sync

__all__ = ["bench_decode", "StepClock"]


class StepClock:
    """A logits processor (any callable ``(input_ids, scores) -> scores`` works in ``generate``) that
    records when each new token's scores are ready; synchronises on CUDA so the stamp is real."""

    def __init__(self, device: str = "cpu", clock: str = "wall") -> None:
        self.device = device
        self.timer = check_clock(clock, device)
        self.stamps: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        sync(self.device)
        self.stamps.append(self.timer())
        return scores

    def per_token(self) -> float:
        if len(self.stamps) < 2:
            raise ValueError("the per-token decode time needs at least 2 new tokens (decode_new >= 2)")
        return (self.stamps[-1] - self.stamps[0]) / (len(self.stamps) - 1)


def bench_decode(
    size: Size,
    families: Sequence[str] = MODELS,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    rounds: Rounds | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Per model: ``generate()`` seconds and per-token decode seconds of each encoding against stock;
    the adaptive and deciding rounds watch the per-token figure (the target's)."""
    from transformers import GenerationConfig, LogitsProcessorList

    rounds = rounds or rounds_for(size, "decode")
    repeats, max_rounds, clock = rounds.repeats, rounds.max_rounds, rounds.clock
    new = size.decode_new
    out: dict[str, object] = {"prompt_tokens": size.decode_prompt, "new_tokens": new, "batch": 1,
                              **rounds.describe(), "models": {}}
    for family in families:
        model = build_model(family, size, device, dtype)
        prompt = random_ids(model.config.vocab_size, size.decode_prompt, device=device)
        gen = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                               pad_token_id=model.config.pad_token_id, eos_token_id=model.config.eos_token_id)
        variants = encodings_for(family)

        def measure(model=model, prompt=prompt, gen=gen) -> dict[str, float]:
            steps = StepClock(device, clock)
            with torch.no_grad(), stopwatch(device, clock) as t:
                ids = model.generate(prompt, generation_config=gen, logits_processor=LogitsProcessorList([steps]))
            if ids.shape[1] != prompt.shape[1] + new:
                raise RuntimeError(f"generate() made {ids.shape[1] - prompt.shape[1]} tokens, expected {new}")
            return {"generate_s": t[0], "per_token_s": steps.per_token()}

        progress(f"decode: {family}, {len(variants)} encodings x {repeats}-{max_rounds} paired rounds")
        res = side_by_side(measure, variants, patched(model), warmup=1,
                           progress=lambda s, f=family: progress(f"decode: {f} {s}"), watch=["per_token_s"],
                           limits=limits_for("decode_per_token", variants), **rounds.side_by_side())
        out["models"][family] = res
        del model
    return out
