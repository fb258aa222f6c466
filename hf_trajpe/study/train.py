"""Train one study model from scratch: built from a transformers config, patched, AdamW, saved.

Runs in a worker process (one thread each: on a small CPU two one-thread processes train more
models per minute than one two-thread process). The same seed gives every encoding the same
initial weights and the same batches, so encodings are compared on paired runs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path

import torch

from .runs import Run

__all__ = ["build_model", "train_run", "lr_factor", "quiet_transformers"]

SUMMARY = "train_summary.json"


def build_model(model_config: dict, seed: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = dict(model_config)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    return AutoModelForCausalLM.from_config(config)


def quiet_transformers() -> None:
    """No per-model "Loading weights"/"Writing model shards" bars: the study prints one line per model."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def lr_factor(step: int, steps: int, warmup: int) -> float:
    """Linear warm-up, then linear decay to 10% of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.1, 1.0 - (step - warmup) / max(1, steps - warmup))


def train_run(run: Run, model_config: dict, train: dict, tokenizer: str, blocks_path: str,
              threads: int = 1) -> dict:
    """Train ``run``, save it (weights, patch, ``train_summary.json``) atomically; return the summary."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(threads)
    quiet_transformers()
    import hf_trajpe
    from hf_trajpe.data import load_tokenizer

    model = build_model(model_config, run.seed)
    handle = hf_trajpe.patch(model, **run.options) if run.options is not None else None
    if handle is not None and handle.config.encoding == "trajectory" and handle.config.strength == "auto":
        handle.set_tokenizer(load_tokenizer(tokenizer))  # detect each training block's content type
    blocks = torch.load(blocks_path)
    steps, batch = train["steps"], train["batch_size"]
    gen = torch.Generator().manual_seed(run.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=train["lr"], weight_decay=train["weight_decay"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, train["warmup_steps"]))
    model.train()
    curve, window = [], []
    start = time.perf_counter()
    for step in range(steps):
        ids = blocks[torch.randint(0, len(blocks), (batch,), generator=gen)]
        loss = model(input_ids=ids, labels=ids).loss
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{run.name} seed {run.seed}: loss became {loss.item()} at step {step}; "
                                     "lower train.lr or check the encoding options")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train["max_grad_norm"])
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        window.append(loss.item())
        if (step + 1) % train["log_every"] == 0 or step + 1 == steps:
            curve.append({"step": step + 1, "loss": sum(window) / len(window)})
            window = []
    seconds = time.perf_counter() - start
    summary = {"name": run.name, "seed": run.seed, "patch": handle.config.to_dict() if handle else None,
               "steps": steps, "batch_size": batch, "block_size": int(blocks.shape[1]),
               "train_seconds": seconds, "tokens_per_second": steps * batch * blocks.shape[1] / seconds,
               "first_loss": curve[0]["loss"], "final_loss": curve[-1]["loss"], "curve": curve,
               "threads": threads}
    if handle is not None and handle.config.learnable_strength:
        summary["learned_strength"] = float(handle.state.strength.value)
    _save(model, run.folder, summary)
    return summary


def _save(model, folder: Path, summary: dict) -> None:
    """Write into ``<folder>.tmp`` and rename: a killed study never leaves a half-written model."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    (tmp / SUMMARY).write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)
