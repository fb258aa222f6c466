"""A full forward and a forward+backward training step, patched against stock, for every encoding.

Batch 1 x ``size.tokens`` random token ids, sdpa attention. The training step is forward (with the
LM loss) plus ``backward()``; the optimizer step is left out because it costs the same for both
models and would only dilute the ratio. Gradients are cleared outside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .setup import MODELS, Rounds, Size, build_model, encodings_for, patched, random_ids, rounds_for
from .targets import limits_for
from .timing import side_by_side, wall

__all__ = ["bench_models", "describe_model"]


def describe_model(model: torch.nn.Module) -> dict[str, object]:
    cfg = model.config
    return {
        "model_type": cfg.model_type,
        "layers": cfg.num_hidden_layers,
        "width": cfg.hidden_size,
        "heads": cfg.num_attention_heads,
        "vocab": cfg.vocab_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "attention": model.config._attn_implementation,
    }


def bench_models(
    size: Size,
    families: Sequence[str] = MODELS,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    rounds: Rounds | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, object]:
    """Per model: forward and training-step time of each encoding against stock (paired ratios with their
    intervals, medians); ``rounds``: the size's by default. The training step's targets are decided with
    more rounds where needed (setup.Rounds)."""
    rounds = rounds or rounds_for(size, "models")
    repeats, max_rounds, clock = rounds.repeats, rounds.max_rounds, rounds.clock
    adaptive = rounds.side_by_side()
    out: dict[str, object] = {"tokens": size.tokens, "batch": 1, **rounds.describe(), "models": {}}
    for family in families:
        model = build_model(family, size, device, dtype)
        ids = random_ids(model.config.vocab_size, size.tokens, device=device)
        variants = encodings_for(family)
        context = patched(model)

        def forward(model=model, ids=ids) -> None:
            model.eval()
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)

        def train_step(model=model, ids=ids) -> None:
            model.train()
            model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

        def measure_train(model=model) -> dict[str, float]:
            sec = wall(train_step, device, clock)
            model.zero_grad(set_to_none=True)
            return {"seconds": sec}

        progress(f"models: {family} forward, {len(variants)} encodings x {repeats}-{max_rounds} paired rounds")
        fwd = side_by_side(lambda: {"seconds": wall(forward, device, clock)}, variants, context, warmup=1,
                           progress=lambda s, f=family: progress(f"models: {f} forward {s}"),
                           **dict(adaptive, decide_budget_s=None, decide_max_rounds=None))  # (no target)
        measure_train()  # warm-up of the backward pass (stock)
        progress(f"models: {family} training step, {len(variants)} encodings x {repeats}-{max_rounds} paired "
                 "rounds")
        train = side_by_side(measure_train, variants, context, warmup=0,
                             progress=lambda s, f=family: progress(f"models: {f} training step {s}"),
                             limits=limits_for("train_step", variants), **adaptive)
        out["models"][family] = {"config": describe_model(model), "forward": fwd, "train_step": train}
        del model
    return out
