"""The content study as a suite of the engine (:mod:`.engine`): models trained from scratch per encoding on
the seven content types mixed, evaluated per content type and context length (perplexity against the
baseline, :func:`hf_trajpe.evaluation.evaluate_models`), the random-content control, where the trajectory
models put their tokens, and the strength sweep; the evaluation besides perplexity is :mod:`.eval`, the report
:mod:`.report`.
"""

from __future__ import annotations

from pathlib import Path

from ...config import experiment_config
from ...records import read_sessions
from ...registry import register_suite
from ...rows import ROWS, save_rows
from ...runs import Run
from ...screen import first_screen
from ...suite import Part, Prepared, Suite
from .config import StudyConfig
from .eval import control_all, positions_all
from .report import write_study_report
from .sweep import plan_runs, sweep_names

__all__ = ["ContentSuite", "prepare_data", "run_experiment"]


def prepare_data(cfg: StudyConfig, out: Path, log) -> Path:
    """The content-type datasets under ``out/data``, and the training blocks every run trains on
    (``build_run_data`` of the runs' data section, built once: equal blocks per type) in ``train_rows.pt``."""
    from ....data import save_all
    from ....training import RunData, build_run_data, load_run_tokenizer

    data_dir, rows_path = out / "data", out / ROWS
    if not (data_dir / "manifest.json").exists():
        log(f"building the content-type datasets into {data_dir}")
        save_all(data_dir, sizes={"train": cfg.data.train, "validation": 0, "test": cfg.data.test},
                 seed=cfg.data.seed, progress=False)
    if not rows_path.exists():
        exp = experiment_config(cfg, cfg.baseline, None, cfg.seeds[0], out)
        blocks = build_run_data(exp.data, load_run_tokenizer(exp.model), exp.model.task).train
        save_rows(rows_path, RunData(blocks, {}, list(exp.data.content_types)))
        n = len(blocks) // len(exp.data.content_types)
        log(f"{len(blocks)} training blocks of {cfg.data.block_size} tokens ({n} per content type)")
    return rows_path


def run_experiment(cfg: StudyConfig, run: Run) -> dict:
    """The run's experiment config, working in ``<folder>.tmp``."""
    work = run.folder.with_name(run.folder.name + ".tmp")
    return experiment_config(cfg, run.name, run.options, run.seed, work).to_dict()


@register_suite
class ContentSuite(Suite):
    """One part (every content type together); the sweep's runs beside the encodings'."""

    name = "content"
    config = StudyConfig

    def parts(self, cfg: StudyConfig, log) -> list[Part]:
        return [Part("content")]

    def prepare(self, cfg: StudyConfig, part: Part, out: Path, log) -> Prepared:
        return Prepared(prepare_data(cfg, out, log), cfg.data.block_size, {"data_dir": out / "data"})

    def plan(self, cfg: StudyConfig, part: Part, out: Path) -> list[Run]:
        return plan_runs(cfg)

    def experiment(self, cfg: StudyConfig, part: Part, prepared: Prepared, run: Run) -> dict:
        return run_experiment(cfg, run)

    def evaluate(self, cfg: StudyConfig, part: Part, prepared: Prepared, runs: list[Run], progress: bool,
                 log) -> dict:
        from ....evaluation import evaluate_models

        data_dir = prepared.extra["data_dir"]
        models: dict[str, list[str]] = {}
        for run in sorted(runs, key=lambda r: (r.name not in cfg.encodings, r.seed)):
            models.setdefault(run.name, []).append(str(run.folder))
        order = list(cfg.encodings) + [n for n in models if n not in cfg.encodings]
        models = {n: models[n] for n in order}
        log(f"evaluating {sum(len(v) for v in models.values())} models on {cfg.eval.length_multipliers}x "
            f"{cfg.data.block_size} tokens")
        result = evaluate_models(models, baseline=cfg.baseline, tokenizer=cfg.tokenizer,
                                 block_size=cfg.data.block_size, length_multipliers=cfg.eval.length_multipliers,
                                 max_sequences=cfg.eval.max_sequences, n_test=cfg.data.test, data_dir=data_dir,
                                 batch_size=cfg.eval.batch_size, n_resamples=cfg.eval.n_resamples,
                                 level=cfg.eval.level, progress=progress, equivalence_margin=cfg.equivalence_margin)
        return {"result": result, "control": control_all(cfg, models, data_dir),
                "positions": positions_all(cfg, models, data_dir, result.meta["content_types"])}

    def report(self, cfg: StudyConfig, results: dict, summaries: list[dict], timing: dict, versions: dict,
               command: str | None) -> dict[str, Path]:
        (part,) = timing["parts"].values()
        timing = {"train_wall_seconds": part["train_wall_seconds"], "eval_wall_seconds": part["eval_wall_seconds"],
                  "total_wall_seconds": timing["total_wall_seconds"],
                  "training_sessions": read_sessions(Path(cfg.output_dir))}
        r = results["content"]
        return write_study_report(cfg, r["result"], summaries, sweep_names(cfg), timing, versions, command,
                                  r["control"], r["positions"])

    def first_screen(self, paths: dict[str, Path]) -> str:
        return first_screen(paths["study_md"].read_text())
