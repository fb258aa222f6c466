"""A published task study's verdicts recomputed with the current statistics from its ``tasks.json`` alone (the
models need not be on the machine), and its reports written again.

The JSON keeps, per model, task, split and metric, every seed's score, and per difference its standard error
``se`` (seed part plus example part, :func:`~hf_trajpe.evaluation.seed_inference.seed_interval`): the example
part is ``se^2 - var(per-seed differences) / S``, exactly. From these the interval and p-value of every
difference are made again as the study now makes them (so a difference whose seeds all agree takes the exact
sign-flip bound), every accuracy whose seeds all agree gets the interval of that bound, and the family is judged
again with the declared correction (the ``correction`` and ``analysis`` of the study's YAML, which hold the
plan; everything else comes from the JSON). A verdict that changes keeps the earlier one as ``earlier_verdict``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ....evaluation.seed_inference import seed_interval, t_ppf
from ....training.typed_config import from_dict
from .config import TaskStudyConfig
from .report import METRICS, _markdown, judge_tasks

__all__ = ["rejudge_task_report", "rejudge_legacy_report", "NOTE", "LEGACY_NOTE"]

#: the line the re-written report carries under its title
NOTE = ("Verdicts recomputed from this study's `tasks.json` with the current statistics (seeds that all agree: the "
        "exact sign-flip bound, not t) by `{command}`; the models were not scored again.")


#: the note a report of the older format gets at its top (its tables are not rendered again)
LEGACY_NOTE = ("**Superseded, and partly recomputed.** This report was made with the earlier statistics (a two-level "
               "percentile bootstrap, no correction across comparisons). Where all three seeds gave the same value, "
               "its interval had zero width; `{command}` replaced those in `tasks.json` with the exact sign-flip "
               "bound over seeds (the tables below still show the old values). Verdicts that changed:")


def _difference(d: dict, mine: list[float], theirs: list[float], level: float) -> dict:
    per_seed = np.asarray(mine, np.float64) - np.asarray(theirs, np.float64)
    seed_part = per_seed.var(ddof=1) / per_seed.size if per_seed.size > 1 else 0.0
    example_sd = math.sqrt(max(0.0, float(d["se"]) ** 2 - seed_part))
    iv = seed_interval(float(d["difference"]), per_seed, example_sd, level, bounds=(-1.0, 1.0))
    if not iv["zero_spread"]:  # the same formula as the study's: it must give back the published numbers
        if not (np.allclose(iv["ci"], d["ci"], atol=1e-9) and math.isclose(iv["p_value"], d["p_value"],
                                                                           rel_tol=1e-6, abs_tol=1e-12)):
            raise ValueError(f"the per-seed values do not give back the published interval {d['ci']}: "
                             "this tasks.json was not written by the task study")
    d.update(ci=iv["ci"], ci_equivalence=iv["ci_equivalence"], p_value=iv["p_value"], method=iv["method"],
             zero_spread=iv["zero_spread"])
    return d


def _accuracy(cell: dict, level: float) -> None:
    """An accuracy whose seeds all agree: the interval of the exact bound (others are as the study made them)."""
    per_seed = np.asarray(cell["per_seed"], np.float64)
    if per_seed.size > 1 and np.ptp(per_seed) == 0.0:
        lo, hi = cell["ci_examples"]
        example_sd = (hi - lo) / (2.0 * t_ppf(1.0 - (1.0 - level) / 2.0, math.inf))
        iv = seed_interval(float(cell["mean"]), per_seed, example_sd, level, bounds=(0.0, 1.0))
        cell.update(ci=iv["ci"], method=iv["method"])


def _rejudge_results(results: dict, baseline: str, level: float) -> None:
    for per_split in results.values():
        for split, cell in per_split.items():
            if "skipped" in cell:
                continue
            for metric, (to_base, to_ref, _) in METRICS.items():
                _accuracy(cell[metric], level)
                found = [(baseline, cell[to_base])] if to_base in cell else []
                found += list(cell.get(to_ref, {}).items())
                for ref, d in found:
                    _difference(d, cell[metric]["per_seed"], results[ref][split][metric]["per_seed"], level)


def rejudge_task_report(report_dir: str | Path, config: str | Path, command: str) -> list[str]:
    """Re-judge ``report_dir/tasks.json`` and write it and ``tasks.md`` again; ``config``: the study's YAML,
    whose declared ``correction`` and ``analysis`` are the plan. Returns the verdicts that changed, as lines."""
    from ...loading import load_study_config

    path = Path(report_dir) / "tasks.json"
    data = json.loads(path.read_text())
    plan = load_study_config(config)
    saved = {**data["config"], "correction": plan.correction, "analysis": plan.to_dict()["analysis"]}
    cfg = from_dict(TaskStudyConfig, saved).validate()
    level = cfg.eval.level
    before = {}
    for task, entry in data["tasks"].items():
        _walk(entry["results"], lambda key, d, t=task: before.setdefault((t, *key), d.get("verdict")))
        _rejudge_results(entry["results"], cfg.baseline, level)
    aggregated = {task: entry["results"] for task, entry in data["tasks"].items()}
    family = judge_tasks(cfg, aggregated)
    changed: list[str] = []

    def note(key, d, task):
        earlier = before[(task, *key)]
        if earlier != d["verdict"]:
            d["earlier_verdict"] = earlier
            changed.append(f"{task}, {key[2]}, {key[0]} vs {key[3]}, {key[1]}: {earlier} -> {d['verdict']} "
                           f"(p {d['p_value']:.3g})")

    for task, entry in data["tasks"].items():
        _walk(entry["results"], lambda key, d, t=task: note(key, d, t))
    from ....evaluation.verdicts import family_method

    data["config"] = cfg.to_dict()
    data["method"].update(correction=cfg.correction, family_size=family,
                          verdicts=family_method(family, level, cfg.correction), analysis=cfg.to_dict()["analysis"],
                          rejudged=NOTE.format(command=command))
    results = {task: {"length": e["training_length"], "lengths": e["mean_characters"], "steps": e["steps"],
                      "budget": e["budget"], "positions": e["positions"]} for task, e in data["tasks"].items()}
    path.write_text(json.dumps(data, indent=2) + "\n")
    md = _markdown(cfg, aggregated, results, data["training"], data["skipped_encodings"], data["timing"],
                   data["versions"], data["command"], family).split("\n")
    md[1:1] = ["", NOTE.format(command=command)]
    (Path(report_dir) / "tasks.md").write_text("\n".join(md) + "\n")
    return changed


def _walk(results: dict, fn) -> None:
    """``fn((model, split, metric, reference), difference)`` for every difference of one task's results."""
    for name, per_split in results.items():
        for split, cell in per_split.items():
            for metric, (to_base, to_ref, _) in METRICS.items():
                if to_base in cell:
                    fn((name, split, metric, "baseline"), cell[to_base])
                for ref, d in cell.get(to_ref, {}).items():
                    fn((name, split, metric, ref), d)


def _legacy_difference(d: dict, mine: list[float], theirs: list[float], level: float, margin: float) -> bool:
    """A difference of the older format (no standard error kept): recomputed only where every seed agrees,
    with the example spread read off its percentile interval over examples; returns whether it was."""
    from ....evaluation.verdicts import plain_verdict, significance

    per_seed = np.asarray(mine, np.float64) - np.asarray(theirs, np.float64)
    if per_seed.size < 2 or np.ptp(per_seed) != 0.0:
        return False
    lo, hi = d["ci_examples"]
    example_sd = (hi - lo) / (2.0 * t_ppf(1.0 - (1.0 - level) / 2.0, math.inf))
    iv = seed_interval(float(d["difference"]), per_seed, example_sd, level, bounds=(-1.0, 1.0))
    scaled = tuple(100 * x for x in iv["ci"]), tuple(100 * x for x in iv["ci_equivalence"])
    d.update(ci=iv["ci"], ci_equivalence=iv["ci_equivalence"], p_value=iv["p_value"], method=iv["method"],
             zero_spread=True, significance=significance(scaled[0]), equivalent=False,
             verdict=plain_verdict(*scaled, margin, " points", d.get("degenerate")))
    return True


def rejudge_legacy_report(report_dir: str | Path, command: str, margin: float = 2.0) -> list[str]:
    """A task study of the older format (the pilot): every accuracy and difference whose seeds all agree gets
    the exact bound in ``tasks.json``, and ``tasks.md`` a note at its top listing what changed."""
    path = Path(report_dir) / "tasks.json"
    data = json.loads(path.read_text())
    level = float(data["config"].get("eval", {}).get("level", 0.95))
    baseline = data["baseline"]
    changed: list[str] = []
    for task, entry in data["tasks"].items():
        results = entry["results"]
        for name, per_split in results.items():
            for split, cell in per_split.items():
                if "exact_match" not in cell:
                    continue
                _accuracy(cell["exact_match"], level)
                d = cell.get("vs_baseline")
                if d is not None:
                    earlier = d.get("earlier_verdict", d["verdict"])  # the published one, on a second run too
                    if _legacy_difference(d, cell["exact_match"]["per_seed"],
                                          results[baseline][split]["exact_match"]["per_seed"], level, margin):
                        d["earlier_verdict"] = earlier
                        if earlier != d["verdict"]:
                            changed.append(f"{task}, exact match, {name} vs {baseline}, {split}: {earlier} -> "
                                           f"{d['verdict']} (p {d['p_value']:.3g})")
    path.write_text(json.dumps(data, indent=2) + "\n")
    md_path = Path(report_dir) / "tasks.md"
    md = md_path.read_text().split("\n")
    start = next((i for i, line in enumerate(md) if line.startswith("**Superseded, and partly recomputed.**")), None)
    if start is not None:  # written before: replace the note
        end = next(i for i in range(start + 1, len(md)) if md[i] == "" and (i + 1 >= len(md) or
                                                                             not md[i + 1].startswith("- ")))
        del md[start:end + 1]
    note = [LEGACY_NOTE.format(command=command), ""] + [f"- {c}" for c in changed or ["none"]] + [""]
    md[2:2] = note
    md_path.write_text("\n".join(md))
    return changed
