"""The optional fine-tune of an extension: the chosen frequency scaling trained with PoSE on the user's text, through
the accelerate recipe (``recipes/finetune.py``), then read on the same test documents as the zero-shot choice.

PoSE trains rotary positions on short windows whose ids skip up to the target length, so it can only train a
frequency scaling: a remap (Self-Extend, DCA, ReRoPE) maps distances at read time and has nothing for PoSE to adapt
(:mod:`hf_trajpe.training.pose` refuses it). When the rule chose a remap, or kept the model as it is, the fine-tune
trains the frequency scaling that read the validation text best past the trained length, and says so. Dynamic NTK
is never trained: its frequencies follow the length of each forward, and every PoSE forward is short.

The run lives in ``<out>/finetune/`` (``experiment.yaml``, the recipe's ``run/`` with its checkpoints and
``final/``); an interrupted fine-tune continues from its last checkpoint when the same command is run again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .candidates import Candidate

__all__ = ["FINETUNE_DIR", "TUNED_SUFFIX", "FinetuneError", "FinetunePlan", "config_id", "experiment_config",
           "launch_files", "plan_finetune", "recipe_command", "run_finetune", "training_curve"]

FINETUNE_DIR = "finetune"
#: the name of the tuned model in the reports: the trained candidate's, with this suffix
TUNED_SUFFIX = "+pose"
#: what a PoSE window is at most (tokens): the measured SmolLM2 recipe's, and the trained length where shorter
MAX_WINDOW = 2048
#: frequency scalings PoSE can train (``dynamic`` rescales with each forward's length, and PoSE forwards are short)
TRAINABLE_ROPE_TYPES = ("yarn", "linear", "ntk", "longrope", "llama3")


class FinetuneError(ValueError):
    """A fine-tune that ended without its model (the recipe's own message is above it); a ``ValueError`` so that the
    command says it in one line, with what to do, as it does for bad input."""


@dataclass(frozen=True)
class FinetunePlan:
    """What the fine-tune trains (``candidate``), why that one (``why``), and its name in the reports."""

    candidate: Candidate
    why: str

    @property
    def name(self) -> str:
        return self.candidate.name + TUNED_SUFFIX


def _trainable(candidate: Candidate) -> bool:
    params = (candidate.options or {}).get("rope_parameters") or {}
    return candidate.kind == "scaling" and params.get("rope_type") in TRAINABLE_ROPE_TYPES


def plan_finetune(candidates: Sequence[Candidate], chosen: Candidate, past_loss: Mapping[str, float],
                  fallback: Candidate) -> FinetunePlan:
    """The chosen candidate when PoSE can train it; else the trainable frequency scaling with the lowest validation
    loss past the trained length (``past_loss``), else ``fallback`` (YaRN for the target)."""
    if _trainable(chosen):
        return FinetunePlan(chosen, f"the chosen {chosen.name}, trained with PoSE")
    if chosen.kind == "stock":
        reason = "the rule kept the model as it is"
    elif chosen.kind == "scaling":
        reason = (f"the chosen {chosen.name} rescales its frequencies with the length of each forward, and every "
                  "PoSE forward is short")
    elif chosen.kind == "remap":
        reason = (f"the chosen {chosen.name} is a remap, which PoSE cannot train: it maps distances at read time, with "
                  "no position parameters to adapt")
    else:
        reason = (f"the chosen {chosen.name} places tokens by their content, not by the position ids that PoSE "
                  "skips")
    scalings = [c for c in candidates if _trainable(c) and c.name in past_loss]
    if scalings:
        best = min(scalings, key=lambda c: past_loss[c.name])
        return FinetunePlan(best, f"{reason}; the fine-tune trains {best.name}, the frequency scaling that read the "
                                  "validation text best past the trained length")
    return FinetunePlan(fallback, f"{reason}; the fine-tune trains {fallback.name} ({fallback.why}), no frequency "
                                  "scaling being among the candidates read")


def experiment_config(plan: FinetunePlan, steps: int, *, source: str, tokenizer_source: str, run_dir: str | Path,
                      trained: int, target: int, files: Sequence[str | os.PathLike] | None, dtype: str, seed: int,
                      overrides: Sequence[str] = ()) -> dict:
    """The recipe's experiment config: the whole model trained (AdamW 2e-5, cosine) with PoSE windows of
    ``min(trained, 2048)`` tokens whose ids skip up to ``target``, on ``files`` (the user's text) or this machine's
    real text of the train split (no file of the test documents); ``overrides``: dotted ``key=value`` over it,
    checked as the recipe checks them (``optimizer.lr=1e-4``, ``train.batch_size=2``)."""
    from ..training.config import config_from_dict
    from ..training.typed_config import apply_overrides

    window = min(trained, MAX_WINDOW)
    encoding, options = plan.candidate.patch_options()
    data: dict = {"block_size": window, "eval_blocks": 4}
    if files:
        data["files"] = [str(Path(f).expanduser().resolve()) for f in files]
    else:
        data |= {"content_types": ["real_text"], "train": 1200, "validation": 24, "test": 48}
    cfg = {
        "name": f"extend_{plan.name.replace('+', '_')}",
        "output_dir": str(run_dir),
        "seed": seed,
        "model": {"path": source, "task": "clm", "tokenizer": tokenizer_source},
        "encoding": {"name": encoding, "options": options},
        "pose": {"target_length": target, "chunks": 2},
        "data": data,
        "optimizer": {"name": "adamw", "lr": 2e-5, "weight_decay": 0.0},
        "schedule": {"name": "cosine", "warmup_steps": min(10, steps // 10), "min_lr_ratio": 0.1},
        "train": {"max_steps": steps, "batch_size": 1, "max_grad_norm": 1.0, "log_every": max(1, steps // 10),
                  "eval_every": steps, "eval_at_start": True, "save_every": max(1, steps // 4), "keep_last": 1,
                  "mixed_precision": "bf16" if dtype == "bfloat16" else "no"},
        "logging": {"trackers": ["jsonl"]},
    }
    cfg = apply_overrides(cfg, list(overrides))
    config_from_dict(json.loads(json.dumps(cfg)))  # refused here, with the recipe's message, before any read
    return cfg


def launch_files(accelerate_config: str | Path | None) -> tuple[Path, Path]:
    """The recipe and the accelerate config (one CPU process, ``configs/accelerate/cpu.yaml``, unless given); a
    ``FileNotFoundError`` saying what to do where one is missing (checked before any read)."""
    from ..training.recipe import checkout, recipe_path

    recipe = recipe_path()
    accelerate_config = Path(accelerate_config or checkout() / "configs" / "accelerate" / "cpu.yaml")
    if not accelerate_config.is_file():
        raise FileNotFoundError(f"no accelerate config at {accelerate_config}: give a file such as "
                                "configs/accelerate/gpu.yaml (--accelerate-config)")
    return recipe, accelerate_config


def recipe_command(config: str | Path, accelerate_config: str | Path | None, threads: int | None,
                   resume: bool) -> list[str]:
    """``accelerate launch --config_file ACC recipes/finetune.py --config CONFIG [--resume]`` (:func:`launch_files`)."""
    recipe, accelerate_config = launch_files(accelerate_config)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config)]
    if threads is not None:
        cmd += ["--num_cpu_threads_per_process", str(threads)]
    cmd += [str(recipe), "--config", str(config)]
    return cmd + (["--resume"] if resume else [])


def config_id(cfg: dict) -> str:
    """A short hash of a fine-tune's config: the tuned model's reads are filed under it, so reads of a model trained
    otherwise are never taken for this one's."""
    import hashlib

    return hashlib.sha1(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _check_same(path: Path, cfg: dict, started: bool) -> bool:
    """Whether the fine-tune saved at ``path`` is ``cfg``; another one is refused once it has trained (a checkpoint
    or its model), and replaced, with a note, while it has not (a first start that failed)."""
    from .store import difference

    previous = json.loads(path.read_text())
    diff = difference(previous, cfg)
    if diff and started:
        raise ValueError(f"{path.parent} holds another fine-tune ({'; '.join(diff[:4])}): give the same --finetune "
                         f"options to continue it, another --out, or remove {path.parent} to train afresh (the "
                         "reads of the extension are kept)")
    return not diff


def run_finetune(folder: Path, cfg: dict, accelerate_config: str | Path | None = None, threads: int | None = None,
                 log=print) -> dict:
    """Train (or continue, or take the finished run of) ``cfg`` in ``folder``; returns ``{"model",
    "seconds_last_call", "curve", "command", "config_id"}``. A run of other settings in ``folder`` is refused naming
    the difference once it has trained a step (before that, a failed first start is replaced)."""
    import yaml

    from ..paths import atomic_write_text

    folder.mkdir(parents=True, exist_ok=True)
    path, done_path = folder / "experiment.json", folder / "done.json"
    run_dir = Path(cfg["output_dir"])
    started = (run_dir / "checkpoints").is_dir() or (run_dir / "final").exists()
    if not path.is_file() or not _check_same(path, cfg, started):
        if path.is_file():
            log(f"extend: {folder} held a fine-tune of other settings that never saved a step; replaced by this one")
            done_path.unlink(missing_ok=True)
        atomic_write_text(path, json.dumps(cfg, indent=2) + "\n")
    if done_path.is_file() and (run_dir / "final" / "config.json").is_file():
        log(f"extend: the fine-tune in {run_dir} is done; taken as it is")
        done = json.loads(done_path.read_text())
        return done | {"config_id": config_id(cfg), "seconds_last_call": 0.0}
    config_file = folder / "experiment.yaml"
    config_file.write_text("# the recipe's config of this fine-tune (written by hf-trajpe extend --finetune)\n"
                           + yaml.safe_dump(cfg, sort_keys=False))
    cmd = recipe_command(config_file, accelerate_config, threads, resume=(run_dir / "checkpoints").is_dir())
    log(f"extend: fine-tuning: {' '.join(cmd[2:])}")
    clock = time.perf_counter()
    from ..training.recipe import recipe_env

    status = subprocess.run(cmd, env=recipe_env()).returncode
    if status != 0:
        raise FinetuneError(f"the fine-tune ended with exit status {status} (its message is above); fix that and run "
                           "the same command again: the reads are kept and the fine-tune continues from its last "
                           "checkpoint")
    if not (run_dir / "final" / "config.json").is_file():
        raise FinetuneError(f"the fine-tune stopped before its end (no model in {run_dir / 'final'}; "
                           "train.stop_after?): run the same command again to continue it from its last checkpoint")
    result = {"model": str(run_dir / "final"), "seconds_last_call": time.perf_counter() - clock,
              "curve": training_curve(run_dir), "command": " ".join(cmd[2:]), "config_id": config_id(cfg)}
    atomic_write_text(done_path, json.dumps(result, indent=2) + "\n")
    return result


def training_curve(run_dir: str | Path) -> list[dict]:
    """``{"step", "loss", "perplexity"}`` of the recipe's evaluations on held-out blocks of the training text."""
    path = Path(run_dir) / "eval.json"
    if not path.is_file():
        return []
    out = []
    for entry in json.loads(path.read_text()):
        for name, value in entry.items():
            if isinstance(value, dict) and "loss" in value:
                out.append({"step": entry["step"], "text": name, "loss": value["loss"],
                            "perplexity": value.get("perplexity")})
    return out
