"""The task study's evaluation: exact match and answer-token accuracy of every model on every test split
(:mod:`hf_trajpe.evaluation.answers`), and the step budget chosen on validation where the config gives
candidates."""

from __future__ import annotations

import gc

from ...runs import Run
from .config import TaskStudyConfig

__all__ = ["choose_budget", "evaluate_task", "validation_scores"]


def evaluate_task(cfg: TaskStudyConfig, task: str, dd, runs: list[Run], tokenizer, length: int,
                  progress: bool = True, positions: dict | None = None) -> dict:
    """``{encoding: {split: [AnswerScores per seed] | "skipped: why"}}`` on every test split of the task.
    ``eval.batch_size`` rows of the training ``length`` per batch: a split of longer rows gets fewer rows
    per batch, the same number of tokens (attention memory grows with the square of the length).
    ``positions``: filled with ``{encoding: {split: [displacement statistics per seed]}}`` of the trajectory
    models, read from the scoring forwards themselves (:mod:`hf_trajpe.evaluation.positions`)."""
    from tqdm.auto import tqdm

    from ....data.tasks import get_task
    from ....evaluation import load_model
    from ....evaluation.answers import exact_match
    from ....evaluation.positions import attached, summarize

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


def validation_scores(cfg: TaskStudyConfig, task: str, dsets: dict, runs: list[Run], tokenizer, length: int,
                      progress: bool = True) -> dict:
    """Exact match and answer-token accuracy of every run on its validation split:
    ``{steps: {(name, seed): (exact_match, token_accuracy)}}``."""
    from tqdm.auto import tqdm

    from ....evaluation import load_model
    from ....evaluation.answers import exact_match

    out: dict = {}
    bar = tqdm(total=len(runs), desc=f"{task}: validation", unit="model", disable=not progress)
    for run in runs:
        split = dsets[run.seed if cfg.data.vary_with_seed else None]["validation"]
        longest = max(len(t) for t in split["text"])
        model = load_model(str(run.folder))
        scores = exact_match(model, split, tokenizer, batch_size=max(1, cfg.eval.batch_size * length // max(longest,
                             length)), n_resamples=1)
        out.setdefault(run.steps, {})[(run.name, run.seed)] = (scores.metrics["exact_match"],
                                                              scores.metrics["token_accuracy"])
        del model
        gc.collect()
        bar.update(1)
    bar.close()
    return out


def choose_budget(scores: dict) -> dict:
    """The step count with the highest validation exact match, mean over the task's encodings and seeds (ties:
    answer-token accuracy, then fewer steps), from :func:`validation_scores`; with the means per candidate."""
    table = {}
    for steps, per_run in sorted(scores.items()):
        names = sorted({name for name, _ in per_run})
        table[steps] = {"exact_match": float(sum(v[0] for v in per_run.values()) / len(per_run)),
                        "token_accuracy": float(sum(v[1] for v in per_run.values()) / len(per_run)),
                        "per_encoding": {n: float(sum(v[0] for (m, _), v in per_run.items() if m == n)
                                                  / sum(1 for m, _ in per_run if m == n)) for n in names}}
    chosen = max(table, key=lambda c: (table[c]["exact_match"], table[c]["token_accuracy"], -c))
    return {"candidates": sorted(table), "chosen": chosen, "validation": table,
            "rule": "highest validation exact match, mean over the task's encodings and seeds; ties: answer-token "
                    "accuracy, then fewer steps"}
