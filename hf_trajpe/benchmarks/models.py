"""A full forward and a forward+backward training step, patched against stock, for every encoding.

Batch 1 x ``size.tokens`` random token ids, sdpa attention. The training step is forward (with the
LM loss) plus ``backward()``; the optimizer step is left out because it costs the same for both
models and would only dilute the ratio. Gradients are cleared outside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .setup import MODELS, Size, build_model, encodings_for, patched, random_ids
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
    repeats: int | None = None,
    progress: Callable[[str], None] = print,
    max_rounds: int | None = None,
    budget_s: float | None = None,
) -> dict[str, object]:
    """Per model: forward and training-step time of each encoding against stock (paired ratios with their
    intervals, medians); ``repeats`` to ``max_rounds`` paired rounds, ``budget_s`` per figure set."""
    repeats = repeats or size.repeats["models"]
    max_rounds = max(max_rounds or size.max_rounds.get("models", repeats), repeats)
    budget_s = budget_s if budget_s is not None else size.budget_s.get("models")
    adaptive = dict(max_rounds=max_rounds, budget_s=budget_s)
    out: dict[str, object] = {"tokens": size.tokens, "batch": 1, "repeats": repeats, "max_rounds": max_rounds,
                              "budget_s": budget_s, "models": {}}
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
            sec = wall(train_step, device)
            model.zero_grad(set_to_none=True)
            return {"seconds": sec}

        progress(f"models: {family} forward, {len(variants)} encodings x {repeats}-{max_rounds} paired rounds")
        fwd = side_by_side(lambda: {"seconds": wall(forward, device)}, variants, context, repeats,
                           warmup=1, progress=lambda s, f=family: progress(f"models: {f} forward {s}"), **adaptive)
        measure_train()  # warm-up of the backward pass (stock)
        progress(f"models: {family} training step, {len(variants)} encodings x {repeats}-{max_rounds} paired "
                 "rounds")
        train = side_by_side(measure_train, variants, context, repeats, warmup=0,
                             progress=lambda s, f=family: progress(f"models: {f} training step {s}"), **adaptive)
        out["models"][family] = {"config": describe_model(model), "forward": fwd, "train_step": train}
        del model
    return out
