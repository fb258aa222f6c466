"""The task study as a suite of the engine (:mod:`.engine`): tasks with known answers (docs/tasks.md). One
part per task: its data (built once under ``output_dir/data/<task>``) and its training rows, one example
per row with a loss mask on the answer tokens; one model per (encoding, seed) under ``output_dir/models/<task>``;
then exact-match accuracy on every test split (in distribution and out of distribution) with 95% intervals
over examples and over seeds (:mod:`hf_trajpe.evaluation.answers`); the report is :mod:`.tasks_report`.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

import torch

from .config import patch_options
from .rows import ROWS, load_rows, save_rows
from .runs import Run, run_folder
from .screen import first_screen
from .suite import Part, Prepared
from .tasks_config import LOSSES, TaskStudyConfig, task_experiment
from .tasks_report import write_task_report

__all__ = ["TaskSuite", "evaluate_task", "prepare_task", "training_rows"]

EVAL_ROWS = 8  # validation rows the trainer scores at the end (its logged evaluation)


def training_rows(encoded: Sequence[tuple[list[int], list[bool]]], length: int, pad_id: int,
                  loss: str = "answers") -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, loss mask)``, both ``[N, length]``: ids right-padded with ``pad_id``, the mask True on the
    tokens that carry the loss: the answer tokens (``loss="answers"``) or every token of the text
    (``"all"``), never padding nor a row's first token (nothing precedes it). Padding comes after the text,
    so with a causal model it changes no real token's output, and no attention mask is needed."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    ids = torch.full((len(encoded), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), length), dtype=torch.bool)
    for i, (row, answers) in enumerate(encoded):
        if len(row) > length:
            raise ValueError(f"row {i} has {len(row)} tokens, more than the training length {length}")
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :len(row)] = (torch.tensor(answers, dtype=torch.bool) if loss == "answers"
                              else torch.ones(len(row), dtype=torch.bool))
        mask[i, 0] = False
    return ids, mask


def prepare_task(cfg: TaskStudyConfig, task: str, out: Path, tokenizer, log):
    """The task's ``DatasetDict`` (saved under ``out/data/<task>``, reloaded when present) and its training
    rows (``train_rows.pt`` beside it: ids and loss mask). Returns ``(dataset, rows path, training length)``."""
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
    rows_path = folder / ROWS
    if rows_path.exists():
        length = int(load_rows(rows_path).train.shape[1])
    else:
        train = encode_rows(dd["train"]["text"], dd["train"]["answer_spans"], tokenizer)
        length = max(len(ids) for ids, _ in train)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        val = encode_rows(dd["validation"]["text"][:EVAL_ROWS], dd["validation"]["answer_spans"][:EVAL_ROWS], tokenizer)
        val = [(ids[:length], mask[:length]) for ids, mask in val]
        ids, mask = training_rows(train, length, pad, cfg.data.loss)
        save_rows(rows_path, RunData(ids, {task: training_rows(val, length, pad)[0]}, [task], mask))
        log(f"{task}: {len(train)} training rows of {length} tokens (loss on {cfg.data.loss})")
    return dd, rows_path, length


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


class TaskSuite:
    """One part per task, each with its own encodings and train/data fields (``per_task``)."""

    name = "tasks"
    config = TaskStudyConfig

    def parts(self, cfg: TaskStudyConfig, log) -> list[Part]:
        for name, why in cfg.unavailable().items():
            log(f"skipping encoding {name}: {why}")
        return [Part(task, {"task": task}, f"{task}: ", cfg.for_task(task)) for task in cfg.tasks]

    def prepare(self, cfg: TaskStudyConfig, part: Part, out: Path, log) -> Prepared:
        from ..data import load_tokenizer

        tokenizer = load_tokenizer(cfg.tokenizer)
        dd, rows_path, length = prepare_task(part.cfg, part.name, out, tokenizer, log)
        return Prepared(rows_path, length, {"dataset": dd, "tokenizer": tokenizer})

    def plan(self, cfg: TaskStudyConfig, part: Part, out: Path) -> list[Run]:
        return [Run(name, seed, patch_options(opts), run_folder(out / "models" / part.name, name, seed))
                for name, opts in cfg.task_encodings(part.name).items() for seed in cfg.seeds]

    def experiment(self, cfg: TaskStudyConfig, part: Part, prepared: Prepared, run: Run) -> dict:
        work = run.folder.with_name(run.folder.name + ".tmp")
        return task_experiment(part.cfg, part.name, run.name, run.options, run.seed, work,
                               block_size=prepared.length).to_dict()

    def evaluate(self, cfg: TaskStudyConfig, part: Part, prepared: Prepared, runs: list[Run], progress: bool,
                 log) -> dict:
        from ..evaluation.positions import mean_statistics

        task, dd = part.name, prepared.extra["dataset"]
        log(f"{task}: scoring {len(runs)} models on the test splits")
        positions: dict = {}
        scores = evaluate_task(part.cfg, task, dd, runs, prepared.extra["tokenizer"], prepared.length, progress,
                               positions)
        return {"scores": scores, "length": prepared.length, "lengths": {s: _mean_length(dd[s]) for s in dd},
                "positions": {name: {split: mean_statistics(v) for split, v in per.items()}
                              for name, per in positions.items()}}

    def report(self, cfg: TaskStudyConfig, results: dict, summaries: list[dict], timing: dict, versions: dict,
               command: str | None) -> dict[str, Path]:
        timing = {"tasks": timing["parts"], "total_wall_seconds": timing["total_wall_seconds"]}
        return write_task_report(cfg, results, summaries, cfg.unavailable(), timing, versions, command)

    def first_screen(self, paths: dict[str, Path]) -> str:
        return first_screen(paths["study_md"].read_text())


def _mean_length(split) -> float:
    texts = split["text"]
    return sum(map(len, texts)) / max(1, len(texts))
