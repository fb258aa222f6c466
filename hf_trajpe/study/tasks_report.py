"""The task study's reports: ``tasks.json`` (everything: per task, encoding and test split the exact-match
accuracy with its intervals, answer-token accuracy, the difference to the baseline with its verdict, the
trajectory models' displacement statistics, the training summaries, the config, versions and timings) and
``tasks.md`` (a first screen of the differences to the baseline with their verdicts, then the same as tables).

Verdicts are plain (:mod:`hf_trajpe.evaluation.verdicts`): better / worse / no significant difference at
95%, each with whether the difference is equivalent within ``±equivalence_margin`` accuracy points (two
one-sided tests: the 90% interval of the same draws inside the margin)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..evaluation.answers import accuracy_intervals, paired_difference
from ..evaluation.positions import positions_markdown
from ..evaluation.report import legend
from ..evaluation.verdicts import equivalent, plain_verdict, significance
from .screen import DETAILS, json_default
from .tasks_config import TaskStudyConfig

__all__ = ["aggregate_task", "write_task_report"]


def aggregate_task(cfg: TaskStudyConfig, scores: dict, task: str | None = None) -> dict:
    """``{encoding: {split: summary}}`` of one task's ``{encoding: {split: [AnswerScores] | str}}``; a cell
    holds its difference to the baseline and, under ``vs``, to the references of ``comparisons``."""
    n_res, level = cfg.eval.n_resamples, cfg.eval.level
    base = scores.get(cfg.baseline, {})
    references: dict[str, list[str]] = {}
    for a, b in (cfg.task_comparisons(task) if task is not None else []):
        references.setdefault(a, []).append(b)
    out: dict = {}
    for name, per_split in scores.items():
        out[name] = {}
        for split, seeds in per_split.items():
            if isinstance(seeds, str):
                out[name][split] = {"skipped": seeds}
                continue
            exact = np.stack([s.exact for s in seeds]).astype(np.float64)
            cell = {"exact_match": accuracy_intervals(exact, n_res, level),
                    "token_accuracy": float(np.mean([s.metrics["token_accuracy"] for s in seeds])),
                    "token_accuracy_per_seed": [s.metrics["token_accuracy"] for s in seeds],
                    "token_accuracy_ci_per_seed": [s.metrics["token_accuracy_ci"] for s in seeds],
                    "n_answer_tokens": int(seeds[0].count.sum())}
            b = base.get(split)
            if name != cfg.baseline and b is not None and not isinstance(b, str):
                cell["vs_baseline"] = with_verdict(paired_difference(np.stack([s.exact for s in b]).astype(np.float64),
                                                                     exact, n_res, level), cfg.equivalence_margin)
            for ref in references.get(name, []):
                r = scores.get(ref, {}).get(split)
                if r is not None and not isinstance(r, str):
                    cell.setdefault("vs", {})[ref] = with_verdict(
                        paired_difference(np.stack([s.exact for s in r]).astype(np.float64), exact, n_res, level),
                        cfg.equivalence_margin)
            out[name][split] = cell
    return out


def with_verdict(diff: dict, margin: float) -> dict:
    """A :func:`paired_difference` (fractions) with its verdict on the ±``margin`` points bound."""
    ci = tuple(100 * x for x in diff["ci"])
    ci_eq = tuple(100 * x for x in diff["ci_equivalence"])
    equal = equivalent(ci_eq, margin) and not diff.get("degenerate")
    return {**diff, "margin_points": margin, "significance": significance(ci), "equivalent": equal,
            "verdict": plain_verdict(ci, ci_eq, margin, unit=" points", degenerate=diff.get("degenerate"))}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _ci(ci) -> str:
    return "n/a" if ci is None else f"[{_pct(ci[0])}, {_pct(ci[1])}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def _cells(agg: dict, splits: list[str], fmt) -> list[list[str]]:
    return [[f"`{name}`", *(("skipped" if "skipped" in per[s] else fmt(per[s])) if s in per else "n/a"
                            for s in splits)] for name, per in agg.items()]


def _diff(cell: dict, reference: str | None = None) -> str:
    d = cell.get("vs_baseline") if reference is None else cell.get("vs", {}).get(reference)
    if d is None:
        return f"{_pct(cell['exact_match']['mean'])} (baseline)" if reference is None else "n/a"
    lo, hi = d["ci"]
    sig = "▲" if lo > 0 else ("▼" if hi < 0 else "")
    mark = sig + ("=" if d.get("equivalent") else ("" if sig else "?"))
    return f"{100 * d['difference']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] {mark}"


def _comparison_lines(cfg: TaskStudyConfig, task: str, agg: dict, splits: list[str]) -> list[str]:
    pairs = [(a, b) for a, b in cfg.task_comparisons(task) if a in agg and b in agg]
    if not pairs:
        return []
    rows = [[f"`{a}` − `{b}`", *(("skipped" if "skipped" in agg[a].get(sp, {}) else _diff(agg[a][sp], b))
                                  if sp in agg[a] else "n/a" for sp in splits)] for a, b in pairs]
    return [f"*{task}*, pairs (model − reference, points, paired on the examples):", ""] + _table(
        ["pair", *splits], rows)


def _training_rows(summaries: list[dict], task: str) -> list[list[str]]:
    per: dict[str, list[dict]] = {}
    for s in summaries:
        if s["task"] == task:
            per.setdefault(s["name"], []).append(s)
    rows = []
    for name, runs in per.items():
        strengths = [r["learned_strength"] for r in runs if "learned_strength" in r]
        first, final, seconds = (np.mean([r[k] for r in runs]) for k in ("first_loss", "final_loss", "train_seconds"))
        rows.append([f"`{name}`", str(len(runs)), f"{first:.3f}", f"{final:.3f}", f"{seconds:.0f}",
                     ", ".join(f"{v:.3f}" for v in strengths) or "-"])
    return rows


def _task_md(cfg: TaskStudyConfig, task: str, agg: dict, result: dict, summaries: list[dict],
             timing: dict) -> list[str]:
    from ..data.tasks import get_task

    t = get_task(task)
    cfg = cfg.for_task(task)  # the data and training this task had
    splits = list(t.test_splits)
    seeds = len(cfg.seeds)
    lines = [f"## {task}", "", f"{t.description}. Source: {t.paper}. Options: "
             f"{json.dumps(t.check_options(cfg.tasks[task] or {}))}.", "",
             "Test splits: " + "; ".join(f"`{s}` {what} (mean {result['lengths'][s]:.0f} characters)"
                                         for s, what in t.test_splits.items())
             + f". Trained on {cfg.data.train} examples padded to {result['length']} tokens, {cfg.train.steps} "
             f"steps of {cfg.train.batch_size}, loss on {_loss(cfg)}; "
             f"{timing['new_models']} models trained in {timing['train_wall_seconds']:.0f} s wall, "
             f"scored in {timing['eval_wall_seconds']:.0f} s.", "",
             f"**Exact match (%)**: every answer token right (teacher-forced arg-max), mean over {seeds} seed(s), "
             f"{cfg.data.test} examples per split; 95% interval over examples and seeds together:", ""]
    lines += _table(["encoding", *splits], _cells(agg, splits, lambda c: f"{_pct(c['exact_match']['mean'])} "
                                                                          f"{_ci(c['exact_match']['ci'])}"))
    lines += ["95% intervals of the exact match over test examples only, and over training seeds only:", ""]
    both = lambda c: (f"examples {_ci(c['exact_match']['ci_examples'])}, "  # noqa: E731
                      f"seeds {_ci(c['exact_match']['ci_seeds'])}")
    lines += _table(["encoding", *splits], _cells(agg, splits, both))
    lines += ["**Answer-token accuracy (%)**, mean over seeds:", ""]
    lines += _table(["encoding", *splits], _cells(agg, splits, lambda c: _pct(c["token_accuracy"])))
    lines += [f"**Exact match minus `{cfg.baseline}`'s (points)**, paired on the examples, 95% interval over "
              "examples and seeds: " + legend(cfg.equivalence_margin, " points"), ""]
    lines += _table(["encoding", *splits], _cells(agg, splits, _diff))
    lines += _comparison_lines(cfg, task, agg, splits)
    if result.get("positions"):
        lines += ["Where the trajectory models put their tokens, on each test split (mean over seeds): step "
                  "`p_i - p_(i-1)` and its coefficient of variation, displacement `p_i - i`, clamped share:", ""]
        lines += positions_markdown(result["positions"], what="split")
    lines += ["Training (mean over seeds):", ""]
    lines += _table(["encoding", "seeds", "first loss", "final loss", "s per model", "learned strength"],
                    _training_rows(summaries, task))
    return lines


def _summary(cfg: TaskStudyConfig, aggregated: dict) -> list[str]:
    """The first screen: per task, every encoding's exact match minus the baseline's on every split."""
    seeds = len(cfg.seeds)
    lines = ["## Summary", "", f"{seeds} seed(s) per encoding. Cells: exact match minus `{cfg.baseline}`'s "
             "in points [95% interval] (the baseline's row: its own exact match in %). "
             + legend(cfg.equivalence_margin, " points"), ""]
    for task, agg in aggregated.items():
        splits = list(next(iter(agg.values())))
        sized = cfg.for_task(task)
        lines += [f"**{task}** ({sized.train.steps} steps of {sized.train.batch_size}, loss on {_loss(sized)})", ""]
        lines += _table(["encoding", *splits], _cells(agg, splits, _diff))
        lines += _comparison_lines(cfg, task, agg, splits)
    return lines


def _markdown(cfg, aggregated, results, summaries, skipped, timing, versions, command) -> str:
    m = cfg.model
    shape = ", ".join(f"{m[k]} {w}" for k, w in (("n_layer", "layers"), ("n_embd", "wide"), ("n_head", "heads"),
                                                  ("n_positions", "positions")) if k in m)
    lines = [f"# Task study `{cfg.name}`: exact match on tasks with known answers", "",
             "Small models trained from scratch per task, encoding and seed on the task's train split, scored "
             "on its test splits in distribution (`test`) and out of distribution (see docs/tasks.md).", ""]
    lines += _summary(cfg, aggregated)
    lines += [DETAILS, "",
              f"- command: `{command or 'hf-trajpe study --config ...'}`",
              f"- model: {m.get('model_type')} ({shape}); seeds {cfg.seeds}; tokenizer {cfg.tokenizer}",
              f"- training: {_steps(cfg)} of {cfg.train.batch_size} examples, lr {cfg.train.lr:g}, "
              "loss on " + ", ".join(sorted({_loss(cfg.for_task(t)) for t in cfg.tasks})),
              f"- baseline: `{cfg.baseline}`; intervals: {cfg.eval.level:.0%} percentile bootstrap, "
              f"{cfg.eval.n_resamples} resamples",
              f"- wall time: {timing['total_wall_seconds']:.0f} s in all",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())]
    lines += [f"- skipped encoding `{n}`: {why}" for n, why in skipped.items()]
    lines.append("")
    for task in cfg.tasks:
        lines += _task_md(cfg, task, aggregated[task], results[task], summaries, timing["tasks"][task])
    return "\n".join(lines)


def _loss(cfg: TaskStudyConfig) -> str:
    return "the answer tokens" if cfg.data.loss == "answers" else "every token"


def _steps(cfg: TaskStudyConfig) -> str:
    per = {task: cfg.for_task(task).train.steps for task in cfg.tasks}
    if len(set(per.values())) == 1:
        return f"{cfg.train.steps if not per else next(iter(per.values()))} steps"
    return "steps " + ", ".join(f"{n} ({task})" for task, n in per.items())


def write_task_report(cfg: TaskStudyConfig, results: dict, summaries: list[dict], skipped: dict, timing: dict,
                      versions: dict, command: str | None) -> dict[str, Path]:
    """``tasks.json`` and ``tasks.md`` in ``cfg.report_dir``; returns their paths (``study_json``, ``study_md``)."""
    out = Path(cfg.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    aggregated = {task: aggregate_task(cfg, r["scores"], task) for task, r in results.items()}
    data = {"study": cfg.name, "command": command, "config": cfg.to_dict(), "versions": versions, "timing": timing,
            "skipped_encodings": skipped, "baseline": cfg.baseline,
            "tasks": {task: {"training_length": r["length"], "mean_characters": r["lengths"],
                             "results": aggregated[task], "positions": r.get("positions", {})}
                      for task, r in results.items()},
            "training": sorted(summaries, key=lambda s: (s["task"], s["name"], s["seed"]))}
    paths = {"study_json": out / "tasks.json", "study_md": out / "tasks.md"}
    paths["study_json"].write_text(json.dumps(data, indent=2, default=json_default) + "\n")
    paths["study_md"].write_text(_markdown(cfg, aggregated, results, summaries, skipped, timing, versions, command)
                                 + "\n")
    return paths
