"""Train one study model through :mod:`hf_trajpe.training` (the recipe's ``Trainer``) with its
experiment config (:func:`~hf_trajpe.study.config.experiment_config`), then save it with its summary.

Runs in a worker process (one thread each: on a small CPU two one-thread processes train more
models per minute than one two-thread process). The same seed gives every encoding the same
initial weights and the same batches, so encodings are compared on paired runs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import torch

from .runs import SUMMARY, Run, check_run_folder

__all__ = ["train_run", "publish", "quiet_libraries", "SUMMARY", "EXPERIMENT"]

EXPERIMENT = "experiment.yaml"  # the run's resolved experiment config, beside the model


def quiet_libraries() -> None:
    """No per-model "Loading weights"/"Writing model shards" bars, nor accelerate's note on the tied
    embeddings at every checkpoint: the study prints one line per model."""
    import logging

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    logging.getLogger("accelerate.utils.other").setLevel(logging.ERROR)  # "Removed shared tensor ..."


def train_run(run: Run, experiment: dict, rows_path: str, log_every: int, threads: int = 1) -> dict:
    """Train ``run`` (``experiment``: its experiment config as a dict) on the rows saved at ``rows_path``
    (:mod:`~hf_trajpe.study.rows`, with their loss mask where a suite gives one), save it into ``run.folder``
    atomically; return the summary.

    The trainer works in ``<folder>.tmp``; the model it saves there (``final/``, written by the patched
    model's ``save_pretrained``) gets the summary and is renamed to ``run.folder``: a killed study never
    leaves a half-written model. A folder already at ``run.folder`` is replaced only if it is a model the
    study trained (:func:`~hf_trajpe.study.runs.check_run_folder`); it is moved aside before the rename and
    removed after it, never before."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(threads)
    quiet_libraries()
    from ..training import config_from_dict
    from ..training.trainer import Trainer
    from .rows import load_rows

    cfg = config_from_dict(experiment)
    check_run_folder(run)
    work = Path(cfg.output_dir)
    shutil.rmtree(work, ignore_errors=True)  # <folder>.tmp: this run's own work folder, left by a killed run
    trainer = Trainer(cfg, data=load_rows(rows_path), log=lambda message: None).setup()
    try:
        reason = trainer.train()
        if reason != "done":  # a SIGTERM: the checkpoint in the work folder is not a finished model
            raise RuntimeError(f"{run.name} seed {run.seed}: training stopped at step {trainer.step} ({reason})")
        final = trainer.save_final()
    finally:
        trainer.cleanup()
    summary = _summary(run, trainer, log_every, threads)
    (final / SUMMARY).write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    shutil.copyfile(work / "config.yaml", final / EXPERIMENT)
    publish(final, run)
    shutil.rmtree(work, ignore_errors=True)
    return summary


def publish(final: Path, run: Run) -> None:
    """Rename the finished model to ``run.folder``; an older model of the study there is moved aside
    first and removed only once the new one is in place."""
    folder = Path(run.folder)
    check_run_folder(run)
    if not folder.exists():
        os.replace(final, folder)
        return
    old = folder.with_name(folder.name + ".replaced")
    if old.exists():  # left by a study killed between the two renames below: an older model of this run
        shutil.rmtree(old)
    os.replace(folder, old)
    os.replace(final, folder)
    shutil.rmtree(old)


def _summary(run: Run, trainer, log_every: int, threads: int) -> dict:
    """Loss curve (mean over each ``log_every`` steps), throughput, the patch and the learned strength."""
    steps, batch, block = trainer.step, trainer.cfg.train.batch_size, int(trainer.data.train.shape[1])
    curve, window = [], []
    for step in range(1, steps + 1):
        window.append(trainer.losses[step])
        if step % log_every == 0 or step == steps:
            curve.append({"step": step, "loss": sum(window) / len(window)})
            window = []
    handle, seconds = trainer.handle, trainer.train_seconds
    summary = {"name": run.name, "seed": run.seed, "patch": handle.config.to_dict() if handle else None,
               "steps": steps, "batch_size": batch, "block_size": block,
               "train_seconds": seconds, "tokens_per_second": steps * batch * block / seconds,
               "first_loss": curve[0]["loss"], "final_loss": curve[-1]["loss"], "curve": curve,
               "threads": threads}
    learned = [h for h in getattr(handle, "handles", (handle,)) if h is not None and h.config.learnable_strength]
    if learned:  # (the first: one learnable strength per run in the studies)
        summary["learned_strength"] = float(learned[0].state.strength.value.detach())
    return summary


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)
