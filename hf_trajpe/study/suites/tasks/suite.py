"""The task study as a suite of the engine (:mod:`.engine`): tasks with known answers (docs/tasks.md). One
part per task: its data per model seed (``output_dir/data/<task>/seed_<k>``: the test splits of ``data.seed``,
the validation and train examples drawn for seed ``k``; one folder for all where ``data.vary_with_seed`` is
false) and its training rows, one example per row with a loss mask on the answer tokens; one model per
(encoding, seed) under ``output_dir/models/<task>``, or per (candidate step count, encoding, seed) under
``models/<task>/steps_<n>`` where the budget is chosen on validation (:func:`choose_budget`: the same for every
encoding); then exact match and answer-token accuracy on every test split (in distribution and out of
distribution), :mod:`hf_trajpe.evaluation.answers`; the evaluation is :mod:`.eval`, the report :mod:`.report`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from ...config import patch_options
from ...registry import register_suite
from ...rows import ROWS, load_rows, save_rows
from ...runs import Run, run_folder
from ...screen import first_screen
from ...suite import Part, Prepared, Suite
from .config import LOSSES, TaskStudyConfig, task_experiment
from .eval import choose_budget, evaluate_task, validation_scores
from .report import write_task_report

__all__ = ["TaskSuite", "prepare_task", "training_rows"]

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


def _seed_folders(cfg: TaskStudyConfig, task: str, out: Path) -> dict[int | None, Path]:
    """Where each model seed's data lives: one folder per seed (``data/<task>/seed_<k>``) where the training
    data varies with the seed, else one folder for all (key ``None``)."""
    folder = out / "data" / task
    if not cfg.data.vary_with_seed:
        return {None: folder}
    return {seed: folder / f"seed_{seed}" for seed in cfg.seeds}


def prepare_task(cfg: TaskStudyConfig, task: str, out: Path, tokenizer, log):
    """The task's ``DatasetDict`` per model seed (``{seed: dd}``; one under key ``None`` when the data does not
    vary with the seed), each saved under ``out/data/<task>[/seed_<k>]`` and reloaded when present, with its
    training rows beside it (``train_rows.pt``: ids and loss mask). The test splits are those of ``data.seed``
    in every one. Returns ``({seed: dd}, {seed: rows path}, {seed: training length})``."""
    import datasets

    from ....data.tasks import build_task, encode_rows
    from ....training import RunData

    dsets, rows, lengths = {}, {}, {}
    for seed, folder in _seed_folders(cfg, task, out).items():
        where = "" if seed is None else f" (model seed {seed})"
        if (folder / "dataset_dict.json").exists():
            dd = datasets.load_from_disk(str(folder))
        else:
            log(f"{task}{where}: building {cfg.data.train} train, {cfg.data.validation} validation and "
                f"{cfg.data.test} examples per test split")
            dd = build_task(task, train=cfg.data.train, validation=cfg.data.validation, test=cfg.data.test,
                            seed=cfg.data.seed, train_seed=seed, **(cfg.tasks[task] or {}))
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
            val = encode_rows(dd["validation"]["text"][:EVAL_ROWS], dd["validation"]["answer_spans"][:EVAL_ROWS],
                              tokenizer)
            val = [(ids[:length], mask[:length]) for ids, mask in val]
            ids, mask = training_rows(train, length, pad, cfg.data.loss)
            save_rows(rows_path, RunData(ids, {task: training_rows(val, length, pad)[0]}, [task], mask))
            log(f"{task}{where}: {len(train)} training rows of {length} tokens (loss on {cfg.data.loss})")
        dsets[seed], rows[seed], lengths[seed] = dd, rows_path, length
    return dsets, rows, lengths


@register_suite
class TaskSuite(Suite):
    """One part per task, each with its own encodings and train/data fields (``per_task``)."""

    name = "tasks"
    config = TaskStudyConfig

    def parts(self, cfg: TaskStudyConfig, log) -> list[Part]:
        for name, why in cfg.unavailable().items():
            log(f"skipping encoding {name}: {why}")
        return [Part(task, {"task": task}, f"{task}: ", cfg.for_task(task)) for task in cfg.tasks]

    def prepare(self, cfg: TaskStudyConfig, part: Part, out: Path, log) -> Prepared:
        from ....data import load_tokenizer

        tokenizer = load_tokenizer(cfg.tokenizer)
        dsets, rows, lengths = prepare_task(part.cfg, part.name, out, tokenizer, log)
        first = next(iter(rows))
        return Prepared(rows[first], max(lengths.values()),
                        {"datasets": dsets, "rows": rows, "lengths": lengths, "tokenizer": tokenizer})

    def plan(self, cfg: TaskStudyConfig, part: Part, out: Path) -> list[Run]:
        """Every encoding and seed, once per candidate step count where the budget is chosen on validation
        (``models/<task>/steps_<n>/``), else once (``models/<task>/``); each seed on its own rows where the data
        varies with the seed."""
        sized, root = part.cfg, out / "models" / part.name
        budgets = [(c, root / f"steps_{c}") for c in sized.step_candidates(part.name)] or [(None, root)]
        folders = _seed_folders(sized, part.name, out)
        return [Run(name, seed, patch_options(opts), run_folder(where, name, seed),
                    rows=folders[seed] / ROWS if sized.data.vary_with_seed else None, steps=steps)
                for steps, where in budgets for name, opts in cfg.task_encodings(part.name).items()
                for seed in cfg.seeds]

    def experiment(self, cfg: TaskStudyConfig, part: Part, prepared: Prepared, run: Run) -> dict:
        work = run.folder.with_name(run.folder.name + ".tmp")
        sized = part.cfg
        if run.steps is not None:
            sized = dataclasses.replace(sized, train=dataclasses.replace(sized.train, steps=run.steps))
        length = prepared.extra["lengths"][run.seed if sized.data.vary_with_seed else None]
        return task_experiment(sized, part.name, run.name, run.options, run.seed, work, block_size=length).to_dict()

    def evaluate(self, cfg: TaskStudyConfig, part: Part, prepared: Prepared, runs: list[Run], progress: bool,
                 log) -> dict:
        from ....evaluation.positions import mean_statistics

        task, dsets, tokenizer = part.name, prepared.extra["datasets"], prepared.extra["tokenizer"]
        dd = next(iter(dsets.values()))  # the test splits: the same in every seed's data (those of data.seed)
        budget = None
        if part.cfg.step_candidates(task):
            log(f"{task}: choosing the step budget on validation ({len(runs)} models)")
            budget = choose_budget(validation_scores(part.cfg, task, dsets, runs, tokenizer, prepared.length,
                                                     progress))
            runs = [r for r in runs if r.steps == budget["chosen"]]
            log(f"{task}: budget {budget['chosen']} steps (validation exact match "
                + ", ".join(f"{c}: {v['exact_match']:.3f}" for c, v in budget["validation"].items()) + ")")
        log(f"{task}: scoring {len(runs)} models on the test splits")
        positions: dict = {}
        scores = evaluate_task(part.cfg, task, dd, runs, tokenizer, prepared.length, progress, positions)
        return {"scores": scores, "length": prepared.length, "lengths": {s: _mean_length(dd[s]) for s in dd},
                "budget": budget, "steps": budget["chosen"] if budget else part.cfg.train.steps,
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
