"""``run_study``: one engine for every kind of study. Per part of the study (:class:`~.suite.Part`): its
data and training rows, its runs, their training in parallel worker processes (each run through the
``Trainer`` of :mod:`hf_trajpe.training`, :mod:`.train`), the run records, the evaluation; then the report
and its first screen. What differs between studies is the suite's (:mod:`.suite`, found in :mod:`.registry`).

Finished models are kept under ``output_dir/models`` and reused when the study is run again with the
same model/data/training settings, so an interrupted study continues where it stopped.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

from .lock import locking_output_dir
from .records import append_session, check_output_dir, cpus, package_versions
from .registry import suite_of
from .runs import Run, check_run_folder
from .train import SUMMARY, quiet_libraries, train_run
from .workers import stop_with_parent

__all__ = ["run_study", "train_all"]


def train_all(cfg, runs: list[Run], rows_path: Path | None, log, experiment: Callable[[Run], dict],
              train_fn=train_run) -> list[dict]:
    """Train the runs not done yet, ``workers`` at a time; returns every run's summary (``_new`` on those
    trained now). ``experiment(run)``: a run's experiment config as a dict; ``train_fn``: what trains one run;
    a run trains on its own ``rows`` where it has them, else on ``rows_path`` (None: ``train_fn`` builds its
    own)."""
    todo = [r for r in runs if not r.done]
    for run in todo:  # before any training: a folder the study did not write is refused, never replaced
        check_run_folder(run)
    done = [json.loads((r.folder / SUMMARY).read_text()) for r in runs if r.done]
    if done:
        log(f"reusing {len(done)} trained models from {cfg.output_dir}")
    if not todo:
        return done
    workers = min(cfg.workers, len(todo))
    threads = max(1, cpus() // workers)
    log(f"training {len(todo)} models, {workers} at a time ({threads} thread(s) each)")
    start = time.perf_counter()

    def args(run: Run) -> tuple:
        rows = run.rows or rows_path
        return (None if rows is None else str(rows)), cfg.log_every, threads


    def report(i: int, s: dict) -> None:
        log(f"[{i}/{len(todo)}] {s['name']} seed {s['seed']}: loss {s['first_loss']:.3f} -> {s['final_loss']:.3f} "
            f"in {s['train_seconds']:.0f}s ({time.perf_counter() - start:.0f}s elapsed)")

    summaries = list(done)
    if workers == 1:
        torch_threads = torch.get_num_threads()
        try:
            for i, run in enumerate(todo, 1):
                summaries.append({**train_fn(run, experiment(run), *args(run)), "_new": True})
                report(i, summaries[-1])
        finally:
            torch.set_num_threads(torch_threads)
        return summaries
    ctx = multiprocessing.get_context("spawn")  # no forked torch thread pools
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=stop_with_parent,
                             initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(train_fn, run, experiment(run), *args(run)) for run in todo]
        try:
            for i, fut in enumerate(as_completed(futures), 1):
                summaries.append({**fut.result(), "_new": True})
                report(i, summaries[-1])
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return summaries


@locking_output_dir  # one study at a time in an output_dir (lock.py)
def run_study(cfg, command: str | None = None, progress: bool = True, log=None,
              summary: bool = True) -> dict[str, Path]:
    """Train every run of ``cfg`` (reusing finished ones), evaluate, write the reports; returns their paths.
    ``summary``: end with the report's first screen on stdout (off where a caller shows several studies')."""
    suite = suite_of(cfg)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    quiet_libraries()
    wall = time.perf_counter()
    out = Path(cfg.output_dir)
    check_output_dir(cfg, out)
    results, summaries, timing = {}, [], {}
    for part in suite.parts(cfg, log):
        t0 = time.perf_counter()
        prepared = suite.prepare(cfg, part, out, log)
        runs = suite.plan(cfg, part, out)
        t1 = time.perf_counter()
        done = train_all(part.cfg or cfg, runs, prepared.rows, lambda m, p=part.prefix: log(p + m),
                         experiment=lambda run, p=part, d=prepared: suite.experiment(cfg, p, d, run),
                         train_fn=suite.train_fn)
        t2 = time.perf_counter()
        new = sum(1 for s in done if s.pop("_new", False))
        if new:
            append_session(out, {**part.record, "models": new, "workers": cfg.workers, "wall_seconds": t2 - t1})
        summaries += [{**part.record, **s} for s in done]
        results[part.name] = suite.evaluate(cfg, part, prepared, runs, progress, log)
        timing[part.name] = {"data_seconds": t1 - t0, "train_wall_seconds": t2 - t1, "new_models": new,
                             "eval_wall_seconds": time.perf_counter() - t2}
    paths = suite.report(cfg, results, summaries, {"parts": timing, "total_wall_seconds": time.perf_counter() - wall},
                         package_versions(), command)
    if summary:
        print("\n" + suite.first_screen(paths), flush=True)  # the result: stdout, last
    return paths
