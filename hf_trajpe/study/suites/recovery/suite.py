"""The recovery study as a suite of the engine (:mod:`hf_trajpe.study.engine`): how many fine-tuning steps bring a
pretrained model back after its encoding is swapped, how much of the swap's damage they recover per content type,
and does it then extrapolate better (docs/finetune.md, "Recovery after a swap").

One part; one run per encoding and layer selection (:class:`~.config.RecoveryStudyConfig`), each the recipe
through ``accelerate launch`` (:mod:`.train`): LoRA on real text, the held-out validation files scored before the
first step and every ``train.eval_every`` steps of the experiment config. Then the recovered shares and the
evaluation at 1x/2x/4x (:mod:`.eval`), and the report (:mod:`.report`). A finished run is not trained again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ...registry import register_suite
from ...runs import SUMMARY, Run, run_folder
from ...screen import first_screen
from ...suite import Part, Prepared, Suite
from ...train import EXPERIMENT
from .config import RecoveryStudyConfig
from .eval import extrapolation, recovery_shares, seconds_per_step
from .report import write_recovery_report
from .train import curve, mean_curve, train_recipe, training_data_fingerprint

__all__ = ["RecoverySuite"]


@register_suite
class RecoverySuite(Suite):
    name = "recovery"
    config = RecoveryStudyConfig
    train_fn = staticmethod(train_recipe)

    def parts(self, cfg: RecoveryStudyConfig, log) -> list[Part]:
        return [Part("recovery")]

    def prepare(self, cfg: RecoveryStudyConfig, part: Part, out: Path, log) -> Prepared:
        exp = cfg.base_experiment()
        return Prepared(None, int(exp["data"]["block_size"]), {"experiment": exp})

    def plan(self, cfg: RecoveryStudyConfig, part: Part, out: Path) -> list[Run]:
        root = out / "models"
        return [Run(r.name, seed, cfg.options(r), run_folder(root, r.name, seed))
                for r in cfg.runs() for seed in cfg.seeds]

    def experiment(self, cfg: RecoveryStudyConfig, part: Part, prepared: Prepared, run: Run) -> dict:
        exp = json.loads(json.dumps(prepared.extra["experiment"]))
        (recovery_run,) = [r for r in cfg.runs() if r.name == run.name]
        exp["name"] = f"{cfg.name}_{run.name}"
        exp["output_dir"] = str(run.folder.with_name(run.folder.name + ".tmp"))
        exp["seed"] = run.seed
        exp["encoding"] = cfg.encoding_section(recovery_run)
        if cfg.steps is not None:
            exp["train"]["max_steps"] = cfg.steps
        exp.setdefault("logging", {})["progress"] = False
        return {"config": exp, "recipe": cfg.recipe, "accelerate": cfg.accelerate, "threads": cfg.threads}

    def evaluate(self, cfg: RecoveryStudyConfig, part: Part, prepared: Prepared, runs: list[Run], progress: bool,
                 log) -> dict:
        from ....data.registry import names

        exp, out = prepared.extra["experiment"], Path(cfg.report_dir)
        if cfg.threads is not None:  # the in-process scoring of the recovered shares too
            import torch

            torch.set_num_threads(cfg.threads)
        by_run = {(r.name, r.seed): r for r in runs}
        plan, seeds = cfg.runs(), list(cfg.seeds)

        def folders(name: str) -> list[Path]:
            return [by_run[name, s].folder for s in seeds]

        per_seed = {r.name: {s: curve(by_run[r.name, s].folder) for s in seeds} for r in plan}
        curves = {name: mean_curve(c) for name, c in per_seed.items()}
        seconds = {r.name: float(np.mean([json.loads((f / SUMMARY).read_text())["train_seconds"]
                                          for f in folders(r.name)])) for r in plan}
        tokens = exp["train"]["batch_size"] * exp["data"]["block_size"]
        native = cfg.native()
        first = curves.get(native, [{}])[0] if native else {}
        stock = first["perplexity"] if first.get("step") == 0 else None
        shares, evaluated = {}, False
        if cfg.eval.recovery:
            types = cfg.eval.types or ["real_text", *names()]
            swapped = {r.name: (cfg.options(r), [f / "final" for f in folders(r.name)]) for r in plan
                       if r.encoding != native}
            native_finals = [f / "final" for f in folders(native)] if native else None
            shares = recovery_shares(exp, swapped, native_finals, out, types, cfg.eval.chunks, seeds)
            if cfg.eval.extrapolation:
                finals = {r.name if len(seeds) == 1 else f"{r.name}_s{s}": by_run[r.name, s].folder / "final"
                          for r in plan for s in seeds}
                extrapolation(exp, finals, out, ["real_text"], cfg.eval.real_sequences, "eval_real_text")
                extrapolation(exp, finals, out, names(), cfg.eval.type_sequences, "eval_types")
                evaluated = True
        return {"curves": curves, "curves_per_seed": per_seed if len(seeds) > 1 else None, "seeds": seeds,
                "stock": stock, "seconds": seconds, "shares": shares, "evaluated": evaluated,
                "per_step": {n: float(np.median([seconds_per_step(f, tokens) for f in folders(n)])) for n in curves},
                "runs": [r for r in plan if r.encoding != native], "chunks": cfg.eval.chunks, "experiment": exp,
                "threads": cfg.threads, "folders": {r.name: by_run[r.name, seeds[0]].folder for r in plan},
                "data": training_data_fingerprint(exp) if cfg.eval.recovery else None}

    def report(self, cfg: RecoveryStudyConfig, results: dict, summaries: list[dict], timing: dict, versions: dict,
               command: str | None) -> dict[str, Path]:
        result, out = results["recovery"], Path(cfg.report_dir)
        configs = out / "configs"
        configs.mkdir(parents=True, exist_ok=True)
        for name, folder in result["folders"].items():  # the experiment config each run trained with
            shutil.copyfile(folder / EXPERIMENT, configs / f"{name}.yaml")
        return write_recovery_report(out, result, command)

    def first_screen(self, paths: dict[str, Path]) -> str:
        return first_screen(paths["study_md"].read_text())
