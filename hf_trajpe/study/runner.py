"""``run_study``: data, training (in parallel worker processes, each run through the ``Trainer`` of
:mod:`hf_trajpe.training`), evaluation, reports.

Finished models are kept under ``output_dir/models`` and reused when the study is run again with the
same model/data/training settings, so an interrupted study continues where it stopped.
"""

from __future__ import annotations

import json
import multiprocessing
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

from .config import StudyConfig, experiment_config
from .report import first_screen
from .runs import Run, check_run_folder, plan_runs, sweep_names
from .train import SUMMARY, quiet_libraries, train_run

__all__ = ["run_study", "package_versions"]


def package_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "platform": platform.platform(), "cpus": str(_cpus())}
    for pkg in ("hf_trajpe", "torch", "transformers", "accelerate", "datasets", "evaluate", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _cpus() -> int:
    try:
        import os

        return len(os.sched_getaffinity(0))
    except AttributeError:
        return multiprocessing.cpu_count()


def _check_output_dir(cfg: StudyConfig, out: Path) -> None:
    marker = out / "study.json"
    if marker.exists():
        old = json.loads(marker.read_text()).get("fingerprint")
        if old != cfg.fingerprint():
            raise FileExistsError(
                f"{out} holds models of a study with different model/data/training settings; "
                "set output_dir to a new folder (or delete this one) to train from scratch")
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"fingerprint": cfg.fingerprint(), "config": cfg.to_dict()}, indent=2) + "\n")


def prepare_data(cfg: StudyConfig, out: Path, log) -> Path:
    """The content-type datasets under ``out/data``, and the training blocks every run trains on
    (``build_run_data`` of the runs' data section, built once: equal blocks per type) in ``train_rows.pt``."""
    from ..data import save_all
    from ..training import RunData, build_run_data, load_run_tokenizer
    from .rows import ROWS, save_rows

    data_dir, blocks_path = out / "data", out / ROWS
    if not (data_dir / "manifest.json").exists():
        log(f"building the content-type datasets into {data_dir}")
        save_all(data_dir, sizes={"train": cfg.data.train, "validation": 0, "test": cfg.data.test},
                 seed=cfg.data.seed, progress=False)
    if not blocks_path.exists():
        exp = experiment_config(cfg, cfg.baseline, None, cfg.seeds[0], out)
        blocks = build_run_data(exp.data, load_run_tokenizer(exp.model), exp.model.task).train
        save_rows(blocks_path, RunData(blocks, {}, list(exp.data.content_types)))
        n = len(blocks) // len(exp.data.content_types)
        log(f"{len(blocks)} training blocks of {cfg.data.block_size} tokens ({n} per content type)")
    return blocks_path


def _experiment(cfg: StudyConfig, run: Run) -> dict:
    """The run's experiment config, working in ``<folder>.tmp``."""
    work = run.folder.with_name(run.folder.name + ".tmp")
    return experiment_config(cfg, run.name, run.options, run.seed, work).to_dict()


def train_all(cfg: StudyConfig, runs: list[Run], blocks_path: Path, log, experiment=None,
              train_fn=train_run) -> list[dict]:
    """Train the runs not done yet, ``workers`` at a time; returns every run's summary. ``experiment(cfg,
    run)``: a run's experiment config as a dict (default: the content study's); ``train_fn``: what trains
    one run (default: :func:`~hf_trajpe.study.train.train_run`)."""
    experiment = experiment or _experiment
    todo = [r for r in runs if not r.done]
    for run in todo:  # before any training: a folder the study did not write is refused, never replaced
        check_run_folder(run)
    done = [json.loads((r.folder / SUMMARY).read_text()) for r in runs if r.done]
    if done:
        log(f"reusing {len(done)} trained models from {cfg.output_dir}")
    if not todo:
        return done
    workers = min(cfg.workers, len(todo))
    threads = max(1, _cpus() // workers)
    log(f"training {len(todo)} models, {workers} at a time ({threads} thread(s) each)")
    args = (str(blocks_path), cfg.train.log_every, threads)
    start = time.perf_counter()

    def report(i: int, s: dict) -> None:
        log(f"[{i}/{len(todo)}] {s['name']} seed {s['seed']}: loss {s['first_loss']:.3f} -> {s['final_loss']:.3f} "
            f"in {s['train_seconds']:.0f}s ({time.perf_counter() - start:.0f}s elapsed)")

    summaries = list(done)
    if workers == 1:
        torch_threads = torch.get_num_threads()
        try:
            for i, run in enumerate(todo, 1):
                summaries.append({**train_fn(run, experiment(cfg, run), *args), "_new": True})
                report(i, summaries[-1])
        finally:
            torch.set_num_threads(torch_threads)
        return summaries
    ctx = multiprocessing.get_context("spawn")  # no forked torch thread pools
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = [pool.submit(train_fn, run, experiment(cfg, run), *args) for run in todo]
        try:
            for i, fut in enumerate(as_completed(futures), 1):
                summaries.append({**fut.result(), "_new": True})
                report(i, summaries[-1])
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return summaries


def run_study(cfg: StudyConfig, command: str | None = None, progress: bool = True, log=None,
              summary: bool = True) -> dict[str, Path]:
    """Train every run of ``cfg`` (reusing finished ones), evaluate, write the reports; returns their paths.
    ``summary``: end with the report's first screen on ``log`` (off where a caller shows several studies')."""
    from ..evaluation import evaluate_models
    from .report import write_study_report
    from .task_config import TaskStudyConfig

    if isinstance(cfg, TaskStudyConfig):
        from .task_runner import run_task_study

        return run_task_study(cfg, command=command, progress=progress, log=log, summary=summary)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    quiet_libraries()
    wall = time.perf_counter()
    out = Path(cfg.output_dir)
    _check_output_dir(cfg, out)
    blocks_path = prepare_data(cfg, out, log)
    runs = plan_runs(cfg)
    t_train = time.perf_counter()
    summaries = train_all(cfg, runs, blocks_path, log)
    train_wall = time.perf_counter() - t_train
    trained = sum(1 for s in summaries if s.get("_new"))
    if trained:
        with open(out / "training_sessions.jsonl", "a") as fh:
            fh.write(json.dumps({"models": trained, "workers": cfg.workers, "wall_seconds": train_wall}) + "\n")
    for s in summaries:
        s.pop("_new", None)

    models: dict[str, list[str]] = {}
    for run in sorted(runs, key=lambda r: (r.name not in cfg.encodings, r.seed)):
        models.setdefault(run.name, []).append(str(run.folder))
    order = list(cfg.encodings) + [n for n in models if n not in cfg.encodings]
    models = {n: models[n] for n in order}
    log(f"evaluating {sum(len(v) for v in models.values())} models on {cfg.eval.length_multipliers}x "
        f"{cfg.data.block_size} tokens")
    t_eval = time.perf_counter()
    result = evaluate_models(models, baseline=cfg.baseline, tokenizer=cfg.tokenizer, block_size=cfg.data.block_size,
                             length_multipliers=cfg.eval.length_multipliers, max_sequences=cfg.eval.max_sequences,
                             n_test=cfg.data.test, data_dir=out / "data", batch_size=cfg.eval.batch_size,
                             n_resamples=cfg.eval.n_resamples, level=cfg.eval.level, progress=progress,
                             equivalence_margin=cfg.equivalence_margin)
    control = control_all(cfg, models, out / "data")
    positions = positions_all(cfg, models, out / "data", result.meta["content_types"])
    eval_wall = time.perf_counter() - t_eval
    timing = {"train_wall_seconds": train_wall, "eval_wall_seconds": eval_wall,
              "total_wall_seconds": time.perf_counter() - wall, "training_sessions": _sessions(out)}
    paths = write_study_report(cfg, result, summaries, sweep_names(cfg), timing, package_versions(), command,
                               control, positions)
    if summary:
        print("\n" + first_screen(paths["study_md"].read_text()), flush=True)  # the result: stdout, last
    return paths


def positions_all(cfg: StudyConfig, models: dict[str, list[str]], data_dir: Path,
                  content_types: list[str]) -> dict[str, dict[str, dict]]:
    """Displacement statistics (:mod:`hf_trajpe.evaluation.positions`) of every trajectory model per content
    type, on the test tokens at the training length (the evaluation's blocks at 1x), mean over seeds."""
    from ..data import load_tokenizer
    from ..evaluation import content_streams, load_model
    from ..evaluation.positions import is_trajectory, mean_statistics, position_statistics

    tok = load_tokenizer(cfg.tokenizer)
    streams = content_streams(content_types, tok, "clm", data_dir=data_dir)
    L, longest = cfg.data.block_size, cfg.data.block_size * max(cfg.eval.length_multipliers)
    blocks = {t: torch.tensor(s[: min(len(s) // longest, cfg.eval.max_sequences) * longest]).view(-1, L)
              for t, s in streams.items()}
    out: dict[str, dict[str, dict]] = {}
    for name, folders in models.items():
        if name in cfg.encodings and cfg.encodings[name].get("encoding") != "trajectory":
            continue  # no need to load it to know (sweep models are trajectory)
        per_seed: dict[str, list[dict]] = {}
        for folder in folders:
            model = load_model(folder)
            if not is_trajectory(model):
                break
            for t, b in blocks.items():
                per_seed.setdefault(t, []).append(position_statistics(model, b, cfg.eval.batch_size, tok))
        if per_seed:
            out[name] = {t: mean_statistics(v) for t, v in per_seed.items()}
    return out


def control_all(cfg: StudyConfig, models: dict[str, list[str]], data_dir: Path) -> dict[str, dict]:
    """:func:`random_control` of every model, averaged over seeds (the diagnosis of the control)."""
    from ..data import load_tokenizer
    from ..data.random_content import ALPHABET
    from ..evaluation import content_streams, load_model
    from .control import random_control

    tok = load_tokenizer(cfg.tokenizer)
    stream = content_streams(["random_content"], tok, "clm", data_dir=data_dir)["random_content"]
    alphabet = tok(ALPHABET, add_special_tokens=False)["input_ids"]
    out = {}
    for name, folders in models.items():
        per_seed = [random_control(load_model(f), stream, alphabet, cfg.data.block_size,
                                   batch_size=cfg.eval.batch_size) for f in folders]
        out[name] = {k: (v if isinstance(v, int) else sum(d[k] for d in per_seed) / len(per_seed))
                     for k, v in per_seed[0].items()}  # floor and token count are the same for every seed
    return out


def _sessions(out: Path) -> list[dict]:
    path = out / "training_sessions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
