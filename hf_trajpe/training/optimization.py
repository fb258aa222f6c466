"""The optimizer of a run and its learning-rate schedule (the only schedule: the recipe and the study
both step it once per optimizer step)."""

from __future__ import annotations

import functools
import math

import torch

from .config import ExperimentConfig

__all__ = ["build_optimizer", "build_scheduler", "lr_factor"]


def lr_factor(step: int, total_steps: int, warmup_steps: int = 0, name: str = "linear",
              min_lr_ratio: float = 0.0) -> float:
    """The learning rate of optimizer step ``step`` (from 0) as a fraction of the peak.

    Warm-up: ``(step + 1) / warmup_steps`` (the first step already trains). Then ``constant`` (1),
    ``linear`` (1 -> 0 over the remaining steps) or ``cosine`` (half a cosine, 1 -> 0), never below
    ``min_lr_ratio``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if name == "constant":
        return 1.0
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    if name == "linear":
        return max(min_lr_ratio, 1.0 - progress)
    if name == "cosine":
        return max(min_lr_ratio, 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"unknown schedule {name!r}; use constant, linear or cosine")


def build_optimizer(params, cfg: ExperimentConfig) -> torch.optim.Optimizer:
    o = cfg.optimizer
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay)
    return torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: ExperimentConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """:func:`lr_factor` of ``cfg.schedule`` over ``cfg.train.max_steps`` steps."""
    s = cfg.schedule
    factor = functools.partial(lr_factor, total_steps=cfg.train.max_steps, warmup_steps=s.warmup_steps,
                               name=s.name, min_lr_ratio=s.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
