"""Verdicts of a published content study recomputed with the current statistics, from what its JSON kept.

A content study's ``report.json`` keeps every model's perplexity per seed, content type and length, and each
delta in ``study.json`` keeps its percentile interval over test sequences (``ci_sequences``). That is enough
for the interval the study now uses (:func:`~hf_trajpe.evaluation.bootstrap.delta_with_intervals`): Student's t
over the per-seed deltas (paired by seed) plus the sequence spread, whose standard deviation is read off the
stored 95% percentile interval (its width over ``2 z(0.975)``, exact for a normal bootstrap distribution).
What the JSON did not keep is said in the result: the strength-sweep models' per-seed perplexities are not in
``report.json``, so those comparisons stay out of the recomputed family and are counted in Holm's correction
at their least favourable p-values (:func:`~hf_trajpe.evaluation.seed_inference.holm`, ``unseen``): every
difference called here holds whatever they would have been.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

from ....evaluation.bootstrap import DELTA_BOUNDS, delta_pct
from ....evaluation.claims import CLAIMED_IMPROVEMENT, CONTROL_TYPE
from ....evaluation.claims import verdict as claim_verdict
from ....evaluation.evaluate_models import judge_deltas
from ....evaluation.seed_inference import seed_interval, t_ppf
from ...plan import AnalysisPlan, plan_lines

__all__ = ["rejudge_delta", "rejudge_study", "rejudge_markdown", "SEQUENCE_SD_NOTE"]

SEQUENCE_SD_NOTE = "sequence spread read off the stored 95% percentile interval over sequences"


def rejudge_delta(d: dict, base_seeds: list[float], enc_seeds: list[float], level: float = 0.95) -> dict:
    """``d`` (a published delta) with the current interval and p-value: per-seed perplexities of the
    reference (``base_seeds``) and the model (``enc_seeds``); the published verdict kept as
    ``published_verdict``."""
    out = copy.deepcopy(d)
    lo, hi = d["ci_sequences"]
    stored_level = d.get("level", level)
    sequence_sd = (hi - lo) / (2.0 * t_ppf(1.0 - (1.0 - stored_level) / 2.0, float("inf")))
    pb, pe = np.asarray(base_seeds, np.float64), np.asarray(enc_seeds, np.float64)
    delta = float(delta_pct(pb.mean(), pe.mean()))
    if not np.isclose(delta, d["delta_pct"], rtol=1e-6, atol=1e-9):
        raise ValueError(f"the per-seed perplexities give a delta of {delta:.6f}%, the published one is "
                         f"{d['delta_pct']:.6f}%: they are not the same models")
    if pb.size == pe.size:
        iv = seed_interval(delta, delta_pct(pb, pe), sequence_sd, level, bounds=DELTA_BOUNDS)
    else:
        iv = seed_interval(delta, delta_pct(pb.mean(), pe), sequence_sd, level,
                           per_seed_other=delta_pct(pb, pe.mean()), bounds=DELTA_BOUNDS)
    out.update(published_verdict=d.get("verdict"), published_ci=d.get("ci"), ci=iv["ci"],
               ci_equivalence=iv["ci_equivalence"], p_value=iv["p_value"], se=iv["se"], df=iv["df"],
               method=f"{iv['method']} ({SEQUENCE_SD_NOTE})", sequence_sd=sequence_sd,
               zero_spread=iv["zero_spread"])
    if "claim_verdict" in d:
        out["published_claim_verdict"] = d["claim_verdict"]
    return out


def _per_seed(report: dict, name: str, ctype: str, length: str) -> list[float] | None:
    cell = report.get("results", {}).get(name, {}).get(ctype, {}).get(str(length), {})
    seeds = cell.get("per_seed")
    return [s["perplexity"] for s in seeds] if seeds else None


def rejudge_study(study_dir: str | Path, correction: str = "holm", analysis: dict | None = None) -> dict:
    """Every comparison of the content study in ``study_dir`` (``study.json``, ``report.json``) re-judged with
    the declared ``correction`` (``analysis``: the plan's family and changes, as the study YAML declares them):
    ``{"groups": [{model, reference, kind, deltas: {type: {length: delta}}}], "family_size", "unseen",
    "margin", "level", "seeds", "correction", "analysis"}``."""
    study_dir = Path(study_dir)
    study = json.loads((study_dir / "study.json").read_text())
    report = json.loads((study_dir / "report.json").read_text())
    baseline = study["baseline"]
    margin, level = float(study["meta"]["equivalence_margin"]), float(study["meta"]["level"])
    groups = [(m, baseline, "against the baseline", per_t) for m, per_t in report["deltas"].items()]
    groups += [(m, v["base"], "trajectory against its base", v["deltas"])
               for m, v in study["trajectory_effect"].items()]
    groups += [(v["model"], v["reference"], "pair", v["deltas"]) for v in study["comparisons"].values()]
    sweep = study.get("sweep", {})
    names = sweep.get("models", {})
    for ctype, per_strength in sweep.get("deltas_vs_strength_0", {}).items():
        for s, per_len in per_strength.items():
            if per_len:
                groups.append((names[s], names["0.0"], "strength sweep", {ctype: per_len}))

    out_groups, compared, unseen, seen_keys, shown = [], [], 0, set(), set()
    for model, ref, kind, per_type in groups:
        done: dict = {}
        for ctype, per_len in per_type.items():
            for length, d in per_len.items():
                key = (model, ref, ctype, str(length))
                pb, pe = _per_seed(report, ref, ctype, length), _per_seed(report, model, ctype, length)
                if pb is None or pe is None:
                    if key not in seen_keys:
                        unseen += 1
                        seen_keys.add(key)
                    continue
                seen_keys.add(key)
                done.setdefault(ctype, {})[str(length)] = rejudge_delta(d, pb, pe, level)
        if done and kind == "strength sweep" and all(
                (model, ref, c, L) in shown for c, per_l in done.items() for L in per_l):
            continue  # a sweep model that is also a main encoding: that comparison is shown once
        if done:
            shown.update((model, ref, c, L) for c, per_l in done.items() for L in per_l)
            compared.append((model, ref, done))
            out_groups.append({"model": model, "reference": ref, "kind": kind, "deltas": done})
    family = judge_deltas(compared, margin, level, correction=correction, unseen=unseen)  # the other one beside
    for g in out_groups:
        if g["kind"] == "trajectory against its base":
            for ctype, per_len in g["deltas"].items():
                for d in per_len.values():
                    d["claim_verdict"] = claim_verdict(tuple(d["ci"]), ctype)
                    if ctype != CONTROL_TYPE and ctype in CLAIMED_IMPROVEMENT:
                        low = CLAIMED_IMPROVEMENT[ctype][0]  # ruled out: the interval's upper end below the claim
                        d["claim_ruled_out"] = bool(d["ci"][1] < low)
                        d["published_claim_ruled_out"] = bool(d["published_ci"] and d["published_ci"][1] < low)
    return {"groups": out_groups, "family_size": family, "unseen": unseen, "margin": margin, "level": level,
            "baseline": baseline, "source": str(study_dir), "seeds": study["meta"].get("config", {}).get("seeds"),
            "correction": correction, "analysis": analysis or {"family": "", "changes": []}}


def ruled_out_counts(group: dict) -> dict[str, tuple[int, int, int]]:
    """``{length: (ruled out now, ruled out by the published interval, types with a claim)}`` of one trajectory
    group: the claimed improvement is ruled out where the 95% interval's upper end lies below its minimum."""
    out: dict[str, list[int]] = {}
    for per_len in group["deltas"].values():
        for length, d in per_len.items():
            if "claim_ruled_out" in d:
                n = out.setdefault(length, [0, 0, 0])
                n[0] += d["claim_ruled_out"]
                n[1] += d["published_claim_ruled_out"]
                n[2] += 1
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def _ruled_out_lines(groups: list[dict]) -> list[str]:
    rows = [(g, ruled_out_counts(g)) for g in groups if g["kind"] == "trajectory against its base"]
    if not rows:
        return []
    lengths = sorted({n for _, c in rows for n in c}, key=int)
    lines = ["## The claimed improvements", "",
             "Content types (of those with a claimed range) where the claimed improvement of trajectory over its "
             "base is ruled out: the 95% interval's upper end below the claimed minimum, now (published interval "
             "in parentheses).", "",
             "| comparison | " + " | ".join(f"{n} tokens" for n in lengths) + " |", "|---|" + "---:|" * len(lengths)]
    for g, c in rows:
        cells = [f"{c[n][0]} of {c[n][2]} ({c[n][1]})" if n in c else "-" for n in lengths]
        lines.append(f"| `{g['model']}` vs `{g['reference']}` | " + " | ".join(cells) + " |")
    return lines + [""]


def _short(verdict: str | None) -> str:
    return "-" if not verdict else verdict.split(";")[0]


def _fmt_ci(ci) -> str:
    return "-" if ci is None else f"[{ci[0]:+.1f}, {ci[1]:+.1f}]"


def rejudge_markdown(result: dict, command: str | None = None) -> str:
    """The re-judged study as a report: what changed, in counts and per comparison."""
    groups, level = result["groups"], result["level"]
    n_known = result["family_size"] - result["unseen"]
    lines = ["# The content study's verdicts with the current statistics", "",
             f"Source: the published study in `{result['source']}` (its models are not kept, so nothing was "
             "scored again). Recomputed from its JSON: every delta's interval and p-value as the study now makes "
             "them (Student's t over the per-seed deltas, paired by seed, plus the spread over test sequences; "
             f"the {SEQUENCE_SD_NOTE}), and the verdicts, Holm-adjusted across the family of the report "
             f"({result['family_size']} comparisons: {n_known} recomputed, {result['unseen']} strength-sweep "
             "comparisons whose per-seed perplexities the JSON did not keep, counted at their least favourable "
             "p-values, so every difference called here holds whatever they were). Beside Holm, the "
             "Benjamini-Hochberg adjusted p-value over the same family and what a 5% false discovery rate calls "
             "(`FDR 5%`). Deltas in % of perplexity, positive = the model is better than the reference.",
             "",
             f"Command: `{command}`" if command else "", ""]
    if result.get("seeds"):
        lines += plan_lines(result["seeds"], result["margin"], "%", result.get("correction", "holm"),
                            AnalysisPlan(**result.get("analysis", {})), result["family_size"])
    lines += ["## What changed", "",
             "| comparisons | published verdict | now (Holm) | now at FDR 5% | count |", "|---|---|---|---|---:|"]
    counts: dict = {}
    for g in groups:
        for per_len in g["deltas"].values():
            for d in per_len.values():
                k = (g["kind"], _short(d["published_verdict"]), _short(d["verdict"]), d["significance_bh"])
                counts[k] = counts.get(k, 0) + 1
    lines += [f"| {a} | {b} | {c} | {e} | {n} |" for (a, b, c, e), n in sorted(counts.items())]
    lines += ["", *_ruled_out_lines(groups), "## Every comparison", ""]
    for g in groups:
        lines += [f"### `{g['model']}` against `{g['reference']}` ({g['kind']})", "",
                  "| type | length | delta % | published 95% | now 95% | p | p Holm | p BH | published | now (Holm) "
                  "| FDR 5% |" + (" claim (now) |" if g["kind"] == "trajectory against its base" else ""),
                  "|---|---:|---:|---|---|---:|---:|---:|---|---|---|" + ("---|" if g["kind"] ==
                                                                          "trajectory against its base" else "")]
        for ctype, per_len in g["deltas"].items():
            for length, d in per_len.items():
                row = (f"| {ctype} | {length} | {d['delta_pct']:+.1f} | {_fmt_ci(d['published_ci'])} | "
                       f"{_fmt_ci(d['ci'])} | {d['p_value']:.2g} | {d['p_holm']:.2g} | {d['p_bh']:.2g} | "
                       f"{d['published_verdict']} | {d['verdict']} | {d['significance_bh']} |")
                if "claim_verdict" in d:
                    row += f" {d['claim_verdict']} |"
                lines.append(row)
        lines.append("")
    lines.append(f"Intervals: {level:.0%}, per comparison (not adjusted), so one can exclude 0 without a verdict.")
    return "\n".join(lines) + "\n"
