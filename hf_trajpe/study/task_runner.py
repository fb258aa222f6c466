"""``run_task_study``: the study on tasks with known answers (docs/tasks.md). Per task: the data (built
once under ``output_dir/data/<task>``), one model per (encoding, seed) trained on the task's train split by
the content study's ``train_all``/``train_run`` through :mod:`hf_trajpe.training` (:mod:`.task_train`), then
exact-match accuracy on every test split (in distribution and out of distribution) with 95% intervals
over examples and over seeds (:mod:`hf_trajpe.evaluation.answers`), and the reports (:mod:`.task_report`).

Finished models are kept under ``output_dir/models/<task>`` and reused when the study runs again with the
same model, data, task and training settings.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from functools import partial
from pathlib import Path

from .config import patch_options
from .report import first_screen
from .rows import ROWS, load_rows, save_rows
from .runner import _check_output_dir, package_versions, train_all
from .runs import Run, run_folder
from .task_config import TaskStudyConfig, task_experiment
from .task_train import training_rows
from .train import quiet_libraries, train_run

__all__ = ["evaluate_task", "prepare_task", "run_task_study"]

EVAL_ROWS = 8  # validation rows the trainer scores at the end (its logged evaluation)


def prepare_task(cfg: TaskStudyConfig, task: str, out: Path, tokenizer, log):
    """The task's ``DatasetDict`` (saved under ``out/data/<task>``, reloaded when present) and its training
    rows (``train_rows.pt`` beside it: ids and loss mask). Returns ``(dataset, blocks_path, training length)``."""
    import datasets

    from ..data.tasks import build_task, encode_rows
    from ..training import RunData

    folder = out / "data" / task
    if (folder / "dataset_dict.json").exists():
        dd = datasets.load_from_disk(str(folder))
    else:
        log(f"{task}: building {cfg.data.train} train, {cfg.data.validation} validation and {cfg.data.test} "
            "examples per test split")
        dd = build_task(task, train=cfg.data.train, validation=cfg.data.validation, test=cfg.data.test,
                        seed=cfg.data.seed, **(cfg.tasks[task] or {}))
        quiet = datasets.utils.are_progress_bars_disabled()
        datasets.disable_progress_bars()
        try:
            dd.save_to_disk(str(folder))
        finally:
            if not quiet:
                datasets.enable_progress_bars()
    blocks_path = folder / ROWS
    if blocks_path.exists():
        length = int(load_rows(blocks_path).train.shape[1])
    else:
        train = encode_rows(dd["train"]["text"], dd["train"]["answer_spans"], tokenizer)
        length = max(len(ids) for ids, _ in train)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        val = encode_rows(dd["validation"]["text"][:EVAL_ROWS], dd["validation"]["answer_spans"][:EVAL_ROWS], tokenizer)
        val = [(ids[:length], mask[:length]) for ids, mask in val]
        ids, mask = training_rows(train, length, pad, cfg.data.loss)
        save_rows(blocks_path, RunData(ids, {task: training_rows(val, length, pad)[0]}, [task], mask))
        log(f"{task}: {len(train)} training rows of {length} tokens (loss on {cfg.data.loss})")
    return dd, blocks_path, length


def _experiment(cfg: TaskStudyConfig, run: Run, task: str, length: int) -> dict:
    """The run's experiment config (``cfg`` already :meth:`~TaskStudyConfig.for_task`)."""
    work = run.folder.with_name(run.folder.name + ".tmp")
    return task_experiment(cfg, task, run.name, run.options, run.seed, work, block_size=length).to_dict()


def evaluate_task(cfg: TaskStudyConfig, task: str, dd, runs: list[Run], tokenizer, length: int,
                  progress: bool = True, positions: dict | None = None) -> dict:
    """``{encoding: {split: [AnswerScores per seed] | "skipped: why"}}`` on every test split of the task.
    ``eval.batch_size`` rows of the training ``length`` per batch: a split of longer rows gets fewer rows
    per batch, the same number of tokens (attention memory grows with the square of the length).
    ``positions``: filled with ``{encoding: {split: [displacement statistics per seed]}}`` of the trajectory
    models, read from the scoring forwards themselves (:mod:`hf_trajpe.evaluation.positions`)."""
    from tqdm.auto import tqdm

    from ..data.tasks import get_task
    from ..evaluation import load_model
    from ..evaluation.answers import exact_match
    from ..evaluation.positions import attached, summarize

    splits = list(get_task(task).test_splits)
    out: dict = {}
    bar = tqdm(total=len(runs) * len(splits) * cfg.data.test, desc=f"{task}: exact match", unit="ex",
               disable=not progress)
    for run in runs:
        model = load_model(str(run.folder))
        cells = out.setdefault(run.name, {s: [] for s in splits})
        for split in splits:
            if isinstance(cells[split], str):
                bar.update(dd[split].num_rows)
                continue
            longest = max(len(t) for t in dd[split]["text"])
            rows = max(1, cfg.eval.batch_size * length // max(longest, length))
            try:
                with attached(model) as monitor:
                    cells[split].append(exact_match(model, dd[split], tokenizer, batch_size=rows,
                                                    n_resamples=cfg.eval.n_resamples, level=cfg.eval.level,
                                                    progress=bar.update))
                if monitor is not None and positions is not None:
                    positions.setdefault(run.name, {}).setdefault(split, []).append(summarize(monitor))
            except (IndexError, RuntimeError, ValueError) as err:  # e.g. a learned position table too short
                cells[split] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        del model
        gc.collect()
    bar.close()
    return out


def run_task_study(cfg: TaskStudyConfig, command: str | None = None, progress: bool = True, log=None,
                   summary: bool = True) -> dict:
    """Train every (task, encoding, seed) of ``cfg`` (reusing finished ones), score, write the reports."""
    from ..data import load_tokenizer
    from ..evaluation.positions import mean_statistics
    from .task_report import write_task_report

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    quiet_libraries()
    wall = time.perf_counter()
    out = Path(cfg.output_dir)
    _check_output_dir(cfg, out)
    tokenizer = load_tokenizer(cfg.tokenizer)
    skipped = cfg.unavailable()
    for name, why in skipped.items():
        log(f"skipping encoding {name}: {why}")
    results, summaries, timing = {}, [], {"tasks": {}}
    for task in cfg.tasks:
        t0 = time.perf_counter()
        sized = cfg.for_task(task)  # per_task's train and data fields applied
        dd, blocks_path, length = prepare_task(sized, task, out, tokenizer, log)
        runs = [Run(name, seed, patch_options(opts), run_folder(out / "models" / task, name, seed))
                for name, opts in cfg.task_encodings(task).items() for seed in cfg.seeds]
        t1 = time.perf_counter()
        done = train_all(sized, runs, blocks_path, lambda m, t=task: log(f"{t}: {m}"),
                         experiment=partial(_experiment, task=task, length=length),
                         train_fn=train_run)
        t2 = time.perf_counter()
        new = sum(1 for s in done if s.pop("_new", False))
        if new:
            with open(out / "training_sessions.jsonl", "a") as fh:
                fh.write(json.dumps({"task": task, "models": new, "workers": cfg.workers,
                                     "wall_seconds": t2 - t1}) + "\n")
        summaries += [{"task": task, **s} for s in done]
        log(f"{task}: scoring {len(runs)} models on the test splits")
        positions: dict = {}
        results[task] = {"scores": evaluate_task(sized, task, dd, runs, tokenizer, length, progress, positions),
                         "length": length, "lengths": {s: _mean_length(dd[s]) for s in dd},
                         "positions": {name: {split: mean_statistics(v) for split, v in per.items()}
                                       for name, per in positions.items()}}
        timing["tasks"][task] = {"data_seconds": t1 - t0, "train_wall_seconds": t2 - t1, "new_models": new,
                                 "eval_wall_seconds": time.perf_counter() - t2}
    timing["total_wall_seconds"] = time.perf_counter() - wall
    paths = write_task_report(cfg, results, summaries, skipped, timing, package_versions(), command)
    if summary:
        print("\n" + first_screen(paths["study_md"].read_text()), flush=True)  # the result: stdout, last
    return paths


def _mean_length(split) -> float:
    texts = split["text"]
    return sum(map(len, texts)) / max(1, len(texts))
