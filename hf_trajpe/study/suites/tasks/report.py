"""The task study's reports: ``tasks.json`` (everything: per task, encoding and test split the exact match and
the answer-token accuracy with their intervals, the differences to the baseline and to the references of
``comparisons`` with their p-values and verdicts, the step budget and how it was chosen, the trajectory
models' displacement statistics, the training summaries, the config, versions and timings) and ``tasks.md``
(a first screen of the differences with their verdicts, then the same as tables).

Both metrics get the same machinery (:mod:`hf_trajpe.evaluation.answers`): the mean over seeds with a 95%
interval from Student's t over seeds plus the spread over test examples, differences paired by seed and by
example. Every difference the report shows (exact match and token accuracy, against the baseline and in the
pairs, on every task and split) is one comparison of one family: its raw p-value and its two-one-sided-tests
p-value are adjusted by the config's declared correction (``correction``: Holm's method, or Benjamini-Hochberg's)
across the family, and the verdicts (better / worse / no significant difference, equivalent within
``±equivalence_margin`` points or not) use the adjusted ones; the other correction's calls are shown beside
(:func:`~hf_trajpe.evaluation.verdicts.judge_family`). Both reports open with the declared analysis plan."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ....evaluation.answers import accuracy_intervals, paired_difference
from ....evaluation.metrics import get_metric
from ....evaluation.positions import positions_markdown
from ....evaluation.report import legend, p_text
from ....evaluation.verdicts import family_method, judge_family
from ...plan import plan_lines
from ...screen import DETAILS, json_default
from .config import TaskStudyConfig

__all__ = ["METRICS", "aggregate_task", "judge_tasks", "write_task_report"]

#: the registered metric behind each score of a cell (its key in a cell)
SCORED_BY = {"exact_match": get_metric("exact_match"), "token_accuracy": get_metric("answer_token_accuracy")}
#: the two scores of every cell: their key in a cell, their difference keys (baseline, pairs) and their label
METRICS = {"exact_match": ("vs_baseline", "vs", SCORED_BY["exact_match"].label),
           "token_accuracy": ("token_vs_baseline", "token_vs", SCORED_BY["token_accuracy"].label)}


def _arrays(seeds) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """``{metric: ([S, N] per-example values, [N] example weights or None)}`` of one model on one split."""
    out = {}
    for key, metric in SCORED_BY.items():
        per_seed = [metric.per_example(s.correct, s.count) for s in seeds]
        out[key] = (np.stack([values for values, _ in per_seed]).astype(np.float64), per_seed[0][1])
    return out


def aggregate_task(cfg: TaskStudyConfig, scores: dict, task: str | None = None) -> dict:
    """``{encoding: {split: summary}}`` of one task's ``{encoding: {split: [AnswerScores] | str}}``: per metric
    (exact match, answer-token accuracy) the mean over seeds with its intervals, and its difference to the
    baseline (``vs_baseline``, ``token_vs_baseline``) and to the references of ``comparisons`` (``vs``,
    ``token_vs``), each a :func:`~hf_trajpe.evaluation.answers.paired_difference` (verdicts: :func:`judge_tasks`)."""
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
            mine = _arrays(seeds)
            cell: dict = {"n_answer_tokens": int(seeds[0].count.sum()), "is_baseline": name == cfg.baseline}
            for metric, (values, weights) in mine.items():
                cell[metric] = accuracy_intervals(values, n_res, level, weights=weights)
            b = base.get(split)
            if name != cfg.baseline and b is not None and not isinstance(b, str):
                theirs = _arrays(b)
                for metric, (to_base, _, _) in METRICS.items():
                    cell[to_base] = paired_difference(theirs[metric][0], mine[metric][0], n_res, level,
                                                      weights=mine[metric][1])
            for ref in references.get(name, []):
                r = scores.get(ref, {}).get(split)
                if r is not None and not isinstance(r, str):
                    theirs = _arrays(r)
                    for metric, (_, to_ref, _) in METRICS.items():
                        cell.setdefault(to_ref, {})[ref] = paired_difference(theirs[metric][0], mine[metric][0],
                                                                              n_res, level, weights=mine[metric][1])
            out[name][split] = cell
    return out


def judge_tasks(cfg: TaskStudyConfig, aggregated: dict) -> int:
    """Holm across every difference of the report (both metrics, baseline and pairs, every task and split),
    in place; returns the number of comparisons (a pair that repeats the baseline comparison counts once)."""
    family, keys = [], {}
    for task, agg in aggregated.items():
        for name, per_split in agg.items():
            for split, cell in per_split.items():
                for metric, (to_base, to_ref, _) in METRICS.items():
                    found = [(cfg.baseline, cell[to_base])] if to_base in cell else []
                    found += list(cell.get(to_ref, {}).items())
                    for ref, d in found:
                        family.append(d)
                        keys[id(d)] = (task, split, metric, name, ref)
    return judge_family(family, "difference", cfg.equivalence_margin, cfg.eval.level, unit=" points", scale=100.0,
                        key=lambda d: keys[id(d)], correction=cfg.correction)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _ci(ci) -> str:
    return "n/a" if ci is None else f"[{_pct(ci[0])}, {_pct(ci[1])}]"


def _per_seed(summary: dict) -> str:
    """Every seed's own value: a mean of three can hide one seed that did not learn the task."""
    return " / ".join(_pct(x) for x in summary["per_seed"])


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def _cells(agg: dict, splits: list[str], fmt) -> list[list[str]]:
    return [[f"`{name}`", *(("skipped" if "skipped" in per[s] else fmt(per[s])) if s in per else "n/a"
                            for s in splits)] for name, per in agg.items()]


def _mark(d: dict) -> str:
    sig = {"better": "▲", "worse": "▼"}.get(d.get("significance", ""), "")
    other = "significance_bh" if d.get("correction", "holm") == "holm" else "significance_holm"
    if not sig:  # the declared correction did not call it; the other one may
        sig = {"better": "△", "worse": "▽"}.get(d.get(other, ""), "")
    return sig + ("=" if d.get("equivalent") else ("" if sig else "?"))


#: the marks of a call made only by the correction not declared (Holm's is declared in the published study)
FDR_LEGEND = ("△/▽ better/worse under the other correction (Benjamini-Hochberg's 5% false discovery rate where "
              "Holm's is declared, Holm's where Benjamini-Hochberg's is) but not under the declared one")


def _diff(cell: dict, reference: str | None = None, metric: str = "exact_match") -> str:
    to_base, to_ref, _ = METRICS[metric]
    d = cell.get(to_base) if reference is None else cell.get(to_ref, {}).get(reference)
    if d is None:
        return f"{_pct(cell[metric]['mean'])} (baseline)" if reference is None and cell.get("is_baseline") else "n/a"
    lo, hi = d["ci"]
    if d.get("degenerate"):
        return f"{100 * d['difference']:+.1f} ({d['degenerate']})"
    return f"{100 * d['difference']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] {_mark(d)}"


def _comparison_lines(cfg: TaskStudyConfig, task: str, agg: dict, splits: list[str],
                      metric: str = "exact_match") -> list[str]:
    pairs = [(a, b) for a, b in cfg.task_comparisons(task) if a in agg and b in agg]
    if not pairs:
        return []
    rows = [[f"`{a}` − `{b}`", *(("skipped" if "skipped" in agg[a].get(sp, {}) else _diff(agg[a][sp], b, metric))
                                  if sp in agg[a] else "n/a" for sp in splits)] for a, b in pairs]
    return [f"*{task}*, pairs ({METRICS[metric][2]}, model − reference, points, paired on the examples):", ""] + _table(
        ["pair", *splits], rows)


def _all_comparisons(agg: dict, splits: list[str]) -> list[list[str]]:
    """One row per comparison of the task: its difference, interval, raw p, Holm's and Benjamini-Hochberg's
    adjusted p-values (differences and equivalence), the verdict (the declared correction's) and BH's call."""
    rows = []
    for to_base, to_ref, label in METRICS.values():
        for name, per_split in agg.items():
            for split in splits:
                cell = per_split.get(split, {})
                found = ([(None, cell[to_base])] if to_base in cell else []) + list(cell.get(to_ref, {}).items())
                for ref, d in found:
                    rows.append([label, split, f"`{name}` − " + (f"`{ref}`" if ref else "baseline"),
                                 f"{100 * d['difference']:+.1f}", _ci(d["ci"]), p_text(d.get("p_value")),
                                 p_text(d.get("p_holm")), p_text(d.get("p_equivalence_holm")), d["verdict"],
                                 p_text(d.get("p_bh")), p_text(d.get("p_equivalence_bh")),
                                 d.get("significance_bh", "-")])
    return rows


def _training_rows(summaries: list[dict], task: str) -> list[list[str]]:
    per: dict[tuple[str, int], list[dict]] = {}
    for s in summaries:
        if s["task"] == task:
            per.setdefault((s["name"], s["steps"]), []).append(s)
    rows = []
    for (name, steps), runs in sorted(per.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        strengths = [r["learned_strength"] for r in runs if "learned_strength" in r]
        first, final, seconds = (np.mean([r[k] for r in runs]) for k in ("first_loss", "final_loss", "train_seconds"))
        rows.append([f"`{name}`", str(steps), str(len(runs)), f"{first:.3f}", f"{final:.3f}", f"{seconds:.0f}",
                     ", ".join(f"{v:.3f}" for v in strengths) or "-"])
    return rows


def _data_words(cfg: TaskStudyConfig) -> str:
    if cfg.data.vary_with_seed:
        return (f"training and validation examples drawn anew for each model seed (from data seed {cfg.data.seed} "
                f"and the model seed), so the seed spread includes the training data; the test splits are those "
                f"of data seed {cfg.data.seed} for every model")
    return (f"one draw of training, validation and test examples (data seed {cfg.data.seed}) for every model seed: "
            "the seed spread holds the initial weights and the batch order only")


def _budget_words(cfg: TaskStudyConfig, task: str, result: dict) -> str:
    budget = result.get("budget")
    if not budget:
        return f"{result['steps']} steps for every encoding (the config's train.steps, not chosen on validation)"
    per = "; ".join(f"{c} steps: {100 * v['exact_match']:.1f}%" for c, v in budget["validation"].items())
    if len(budget["candidates"]) == 1:
        return (f"{budget['chosen']} steps for every encoding, set in advance (a single candidate, so nothing was "
                f"chosen; validation exact match {per})")
    return (f"{budget['chosen']} steps for every encoding, chosen on the validation split from {budget['candidates']} "
            f"({budget['rule']}; validation exact match {per})")


def _task_md(cfg: TaskStudyConfig, task: str, agg: dict, result: dict, summaries: list[dict],
             timing: dict, family: int) -> list[str]:
    from ....data.tasks import get_task

    t = get_task(task)
    cfg = cfg.for_task(task)  # the data and training this task had
    splits = list(t.test_splits)
    seeds = len(cfg.seeds)
    lines = [f"## {task}", "", f"{t.description}. Source: {t.paper}. Options: "
             f"{json.dumps(t.check_options(cfg.tasks[task] or {}))}.", "",
             "Test splits: " + "; ".join(f"`{s}` {what} (mean {result['lengths'][s]:.0f} characters)"
                                         for s, what in t.test_splits.items())
             + f". Trained on {cfg.data.train} examples padded to {result['length']} tokens or fewer, batches of "
             f"{cfg.train.batch_size}, loss on {_loss(cfg)}; budget: {_budget_words(cfg, task, result)}; "
             f"{timing['new_models']} models trained in {timing['train_wall_seconds']:.0f} s wall, "
             f"scored in {timing['eval_wall_seconds']:.0f} s.", ""]
    for metric, (_, _, label) in METRICS.items():
        what = SCORED_BY[metric].description
        lines += [f"**{label.capitalize()} (%)**: {what}, mean over {seeds} seed(s), {cfg.data.test} examples per "
                  "split; 95% interval (t over seeds plus the spread over examples); below it, each seed's own "
                  "value (in seed order), then the percentile bootstrap over examples only and over seeds only:", ""]
        lines += _table(["encoding", *splits], _cells(agg, splits, lambda c, m=metric: (
            f"{_pct(c[m]['mean'])} {_ci(c[m]['ci'])}<br>per seed {_per_seed(c[m])}<br>"
            f"examples {_ci(c[m]['ci_examples'])}, seeds {_ci(c[m]['ci_seeds'])}")))
        lines += [f"**{label.capitalize()} minus `{cfg.baseline}`'s (points)**, paired on the examples and seeds: "
                  + legend(cfg.equivalence_margin, " points", family, cfg.correction) + "; " + FDR_LEGEND, ""]
        lines += _table(["encoding", *splits], _cells(agg, splits, lambda c, m=metric: _diff(c, None, m)))
        lines += _comparison_lines(cfg, task, agg, splits, metric)
    lines += ["Every comparison of this task, with its raw p-value, the Holm-adjusted ones (significance; "
              f"equivalence within ±{cfg.equivalence_margin:g} points), the verdict of the declared correction "
              f"({cfg.correction}), and the Benjamini-Hochberg adjusted ones with its call at a 5% false discovery "
              "rate:", ""]
    lines += _table(["metric", "split", "comparison", "points", "95% interval", "p", "p (Holm)",
                     "p equivalence (Holm)", "verdict", "p (BH)", "p equivalence (BH)", "at 5% FDR"],
                    _all_comparisons(agg, splits))
    if result.get("positions"):
        lines += ["Where the trajectory models put their tokens, on each test split (mean over seeds): step "
                  "`p_i - p_(i-1)` and its coefficient of variation, displacement `p_i - i`, clamped share:", ""]
        lines += positions_markdown(result["positions"], what="split")
    lines += ["Training (mean over seeds; every candidate budget, where one was chosen):", ""]
    lines += _table(["encoding", "steps", "seeds", "first loss", "final loss", "s per model", "learned strength"],
                    _training_rows(summaries, task))
    return lines


def _summary(cfg: TaskStudyConfig, aggregated: dict, results: dict, family: int) -> list[str]:
    """The first screen: per task, every encoding's exact match minus the baseline's on every split, the
    pairs, and how the verdicts were made."""
    seeds = len(cfg.seeds)
    lines = ["## Summary", "",
             *plan_lines(cfg.seeds, cfg.equivalence_margin, " points", cfg.correction, cfg.analysis, family),
             f"{seeds} seed(s) per encoding; {_data_words(cfg)}. Cells: exact match minus `{cfg.baseline}`'s in "
             "points [95% interval: Student's t over seeds plus the spread over test examples] (the baseline's "
             "row: its own exact match in %); answer-token accuracy, raw and adjusted p-values in each task's "
             "section. " + legend(cfg.equivalence_margin, " points", family, cfg.correction) + "; " + FDR_LEGEND, ""]
    for task, agg in aggregated.items():
        splits = list(next(iter(agg.values())))
        sized = cfg.for_task(task)
        lines += [f"**{task}**: {_budget_words(sized, task, results[task])}; batches of {sized.train.batch_size}, "
                  f"loss on {_loss(sized)}", ""]
        lines += _table(["encoding", *splits], _cells(agg, splits, _diff))
        lines += _comparison_lines(cfg, task, agg, splits)
    return lines


def _markdown(cfg, aggregated, results, summaries, skipped, timing, versions, command, family) -> str:
    m = cfg.model
    shape = ", ".join(f"{m[k]} {w}" for k, w in (("n_layer", "layers"), ("n_embd", "wide"), ("n_head", "heads"),
                                                  ("n_positions", "positions")) if k in m)
    lines = [f"# Task study `{cfg.name}`: exact match and answer-token accuracy on tasks with known answers", "",
             "Small models trained from scratch per task, encoding and seed on the task's train split, scored "
             "on its test splits in distribution (`test`) and out of distribution (see docs/tasks.md).", ""]
    lines += _summary(cfg, aggregated, results, family)
    lines += [DETAILS, "",
              f"- command: `{command or 'hf-trajpe study --config ...'}`",
              f"- model: {m.get('model_type')} ({shape}); seeds {cfg.seeds}; tokenizer {cfg.tokenizer}",
              f"- data: {_data_words(cfg)}",
              "- training: " + "; ".join(f"{task} {_budget_words(cfg.for_task(task), task, results[task])}"
                                         for task in cfg.tasks)
              + f"; batches of {cfg.train.batch_size} examples, lr {cfg.train.lr:g}, loss on "
              + ", ".join(sorted({_loss(cfg.for_task(t)) for t in cfg.tasks})),
              f"- baseline: `{cfg.baseline}`; intervals: {cfg.eval.level:.0%}, Student's t over seeds (paired by seed "
              f"for differences) plus the spread over test examples ({cfg.eval.n_resamples} bootstrap resamples); "
              "with one seed, the normal interval of the example bootstrap",
              f"- verdicts: {family_method(family, cfg.eval.level, cfg.correction)}",
              f"- wall time: {timing['total_wall_seconds']:.0f} s in all",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())]
    lines += [f"- skipped encoding `{n}`: {why}" for n, why in skipped.items()]
    lines.append("")
    for task in cfg.tasks:
        lines += _task_md(cfg, task, aggregated[task], results[task], summaries, timing["tasks"][task], family)
    return "\n".join(lines)


def _loss(cfg: TaskStudyConfig) -> str:
    return "the answer tokens" if cfg.data.loss == "answers" else "every token"


def write_task_report(cfg: TaskStudyConfig, results: dict, summaries: list[dict], skipped: dict, timing: dict,
                      versions: dict, command: str | None) -> dict[str, Path]:
    """``tasks.json`` and ``tasks.md`` in ``cfg.report_dir``; returns their paths (``study_json``, ``study_md``)."""
    out = Path(cfg.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    aggregated = {task: aggregate_task(cfg, r["scores"], task) for task, r in results.items()}
    family = judge_tasks(cfg, aggregated)
    data = {"study": cfg.name, "command": command, "config": cfg.to_dict(), "versions": versions, "timing": timing,
            "skipped_encodings": skipped, "baseline": cfg.baseline,
            "method": {"intervals": "Student's t over seeds (paired by seed) plus the spread over test examples",
                       "correction": cfg.correction, "family_size": family,
                       "verdicts": family_method(family, cfg.eval.level, cfg.correction),
                       "analysis": cfg.to_dict()["analysis"],
                       "data": _data_words(cfg)},
            "tasks": {task: {"training_length": r["length"], "mean_characters": r["lengths"], "steps": r["steps"],
                             "budget": r.get("budget"), "results": aggregated[task],
                             "positions": r.get("positions", {})}
                      for task, r in results.items()},
            "training": sorted(summaries, key=lambda s: (s["task"], s["name"], s.get("steps", 0), s["seed"]))}
    paths = {"study_json": out / "tasks.json", "study_md": out / "tasks.md"}
    paths["study_json"].write_text(json.dumps(data, indent=2, default=json_default) + "\n")
    paths["study_md"].write_text(_markdown(cfg, aggregated, results, summaries, skipped, timing, versions, command,
                                           family) + "\n")
    return paths
