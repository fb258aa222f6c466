"""Where a trajectory model put its tokens: displacement statistics on test data, per content type or task.

Trajectory positions ``p_i = i + sum of steps`` (docs/spec.md, section 2.6) move by ``1 + alpha tanh(beta
||e_i - e_{i-1}||)`` per token. Whether guidance can help a content type depends on whether the steps
vary there at all: a coefficient of variation near 0 means the positions are a rescaled index. The
counters are the patch's own monitor (:class:`hf_trajpe.TrajectoryMonitor`: the step ``p_i - p_{i-1}``,
mean and max displacement ``p_i - i``, clamped share, smoothness), so a study reads the same figures the
fine-tuning recipe logs.

- :func:`attached` records every forward of a patched model inside a ``with`` block (e.g. the scoring
  forwards of a task split, at no extra cost); :func:`position_statistics` runs blocks of token ids.
- :func:`summarize` reads a monitor; :func:`mean_statistics` averages seeds; :func:`positions_markdown`
  is the report table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ..monitoring import TrajectoryMonitor

__all__ = ["COLUMNS", "attached", "is_trajectory", "mean_statistics", "position_statistics",
           "positions_markdown", "summarize"]

#: report columns: key, header, format
COLUMNS = (("step_mean", "mean step", "{:.3f}"), ("step_cv", "step CV", "{:.3f}"),
           ("displacement_mean", "mean displacement", "{:.2f}"), ("displacement_max", "max displacement", "{:.2f}"),
           ("clamped_share", "clamped share", "{:.2%}"))


def is_trajectory(model) -> bool:
    """Whether ``model`` is patched with trajectory positions (the only ones that move)."""
    try:
        from ..patching import get_handle
        from ..patching.schemes.source import SOURCES

        handle = get_handle(model)
    except Exception:  # not a transformers model
        return False
    encoding = getattr(handle.config, "encoding", None) if handle is not None else None
    return isinstance(encoding, str) and encoding in SOURCES


@contextlib.contextmanager
def attached(model) -> Iterator[TrajectoryMonitor | None]:
    """A fresh :class:`~hf_trajpe.TrajectoryMonitor` on a trajectory model for the block (``None`` for any
    other model); the model's own monitor, if any, is put back afterwards."""
    if not is_trajectory(model):
        yield None
        return
    from ..patching import get_handle

    handle = get_handle(model)
    previous = handle.detach_monitor()
    monitor = TrajectoryMonitor()
    handle.attach_monitor(monitor)
    try:
        yield monitor
    finally:
        handle.detach_monitor()
        if previous is not None:
            handle.attach_monitor(previous)


def summarize(monitor: TrajectoryMonitor) -> dict[str, float]:
    """Mean step and its coefficient of variation, mean and max displacement, clamped share, smoothness.
    The step figures are NaN where the monitor logs 0 (no two consecutive real tokens seen; a CV of steps
    that are all 0): a report must not show an undefined figure as a measured 0."""
    d = monitor.as_dict()
    nan = float("nan")
    mean = d["step_mean"] if d["steps"] else nan
    return {"step_mean": mean, "step_cv": d["step_cv"] if d["steps"] and mean else nan,
            "displacement_mean": d["displacement_mean"], "displacement_max": d["displacement_max"],
            "clamped_share": d["clamped_share"], "smoothness": d["smoothness"], "tokens": d["tokens"]}


@torch.no_grad()
def position_statistics(model, blocks: torch.Tensor, batch_size: int = 16, tokenizer=None) -> dict | None:
    """:func:`summarize` of a trajectory model run on ``blocks`` (``[N, L]`` token ids, no padding);
    ``None`` for a model that is not trajectory. ``tokenizer``: gives ``strength="auto"`` its texts."""
    from .scoring import _texts_for

    with attached(model) as monitor:
        if monitor is None:
            return None
        model.eval()
        device = next(model.parameters()).device
        for start in range(0, blocks.shape[0], batch_size):
            ids = blocks[start:start + batch_size]
            with _texts_for(model, tokenizer, ids):
                model(input_ids=ids.to(device), attention_mask=torch.ones_like(ids).to(device))
        return summarize(monitor)


def mean_statistics(per_seed: list[dict]) -> dict:
    """The mean over seeds of each statistic (the max displacement: the largest)."""
    keys = per_seed[0].keys()
    return {k: (max(s[k] for s in per_seed) if k == "displacement_max" else sum(s[k] for s in per_seed) / len(per_seed))
            for k in keys}


def positions_markdown(stats: dict[str, dict[str, dict]], what: str = "type") -> list[str]:
    """A table of ``{model: {content type or task: summary}}``, one row per model and type."""
    if not stats:
        return []
    lines = [f"| model | {what} | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
             "|---|---|" + "---:|" * len(COLUMNS)]
    for name, per_type in stats.items():
        for t, s in per_type.items():
            lines.append(f"| `{name}` | {t} | " + " | ".join(f.format(s[k]) for k, _, f in COLUMNS) + " |")
    return lines + [""]
