"""One run of the recovery study: the recipe (``recipes/finetune.py``) through ``accelerate launch``, in the
run's work folder ``<folder>.tmp`` (resumed there when a run was interrupted), renamed to the run's folder
with its summary once the recipe has finished: a killed study never leaves a half-trained run that looks done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ....training.recipe import recipe_env
from ...config import patch_value
from ...runs import SUMMARY, Run, check_run_folder
from ...train import EXPERIMENT, publish

__all__ = ["RunFailed", "curve", "mean_curve", "recipe_env", "train_recipe", "training_data_fingerprint"]


class RunFailed(RuntimeError):
    """A recipe or evaluation process ended with an error (its own message is above in the output)."""


def run_process(cmd: list[str], what: str) -> None:
    try:
        subprocess.run(cmd, check=True, env=recipe_env())
    except subprocess.CalledProcessError as err:
        raise RunFailed(f"{what} failed with exit status {err.returncode} (its message is above); fix that and run "
                        "the study again: finished runs are kept and an interrupted one resumes") from None


def curve(run_dir: Path) -> list[dict]:
    """The real_text validation perplexity at every evaluation of a run (``eval.json``), by step."""
    history = json.loads((Path(run_dir) / "eval.json").read_text())
    return [{"step": e["step"], "perplexity": e["real_text"]["perplexity"], "loss": e["real_text"]["loss"]}
            for e in sorted(history, key=lambda e: e["step"])]


def mean_curve(per_seed: dict[int, list[dict]]) -> list[dict]:
    """The seeds' curves as one (one seed: its curve): at each step every seed evaluated, the mean perplexity and
    loss over seeds, each seed's perplexity in ``per_seed`` (in the order of ``per_seed``'s seeds)."""
    curves = list(per_seed.values())
    if len(curves) == 1:
        return curves[0]
    steps = sorted(set.intersection(*({p["step"] for p in c} for c in curves)))
    out = []
    for step in steps:
        points = [next(p for p in c if p["step"] == step) for c in curves]
        out.append({"step": step, "perplexity": sum(p["perplexity"] for p in points) / len(points),
                    "loss": sum(p["loss"] for p in points) / len(points),
                    "per_seed": [p["perplexity"] for p in points]})
    return out


def training_data_fingerprint(exp: dict) -> dict:
    """What every run of the study trained on, built as the recipe builds it from the shared experiment config:
    the number of training blocks and tokens and the SHA-256 of their token ids (the seed changes only the order
    in which the recipe draws them)."""
    import hashlib

    from ....training.config import config_from_dict
    from ....training.data import build_run_data
    from ....training.model import load_run_tokenizer

    cfg = config_from_dict(dict(exp))
    blocks = build_run_data(cfg.data, load_run_tokenizer(cfg.model), cfg.model.task).train
    return {"blocks": int(blocks.shape[0]), "tokens": int(blocks.numel()),
            "sha256": hashlib.sha256(blocks.numpy().astype("<i8").tobytes()).hexdigest()}


def train_recipe(run: Run, experiment: dict, rows_path: str | None, log_every: int, threads: int = 1) -> dict:
    """Fine-tune ``run`` with the recipe; ``experiment``: ``{"config": the run's experiment config, "recipe",
    "accelerate", "threads"}`` (the suite's, :meth:`~.suite.RecoverySuite.experiment`). The recipe builds its own
    data, so ``rows_path`` is not read; its threads are the study's ``threads`` (None: accelerate's choice)."""
    from ....training.tracking import read_metrics

    cfg = experiment["config"]
    check_run_folder(run)
    work = Path(cfg["output_dir"])
    resume = work.exists()  # a run stopped before its end: the recipe goes on from its last checkpoint
    path = run.folder.with_name(f"{run.folder.name}.{EXPERIMENT}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", experiment["accelerate"]]
    if experiment["threads"] is not None:
        cmd += ["--num_cpu_threads_per_process", str(experiment["threads"])]
    cmd += [experiment["recipe"], "--config", str(path)]
    if resume:
        cmd.append("--resume")
    print(f"[recovery] {run.name}: {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    run_process(cmd, f"the {run.name} run")
    seconds = time.perf_counter() - start
    losses = [r["train/loss"] for r in read_metrics(work) if "train/loss" in r]
    points = curve(work)
    patch = None if run.options is None else patch_value(run.options).to_dict()
    summary = {"name": run.name, "seed": run.seed, "patch": patch,
               "steps": max((p["step"] for p in points), default=0), "train_seconds": seconds,
               "first_loss": losses[0] if losses else float("nan"),
               "final_loss": losses[-1] if losses else float("nan"), "curve": points,
               "threads": experiment["threads"]}
    (work / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(path, work / EXPERIMENT)
    publish(work, run)
    return summary
