"""The content study's reports: the evaluation report of the main encodings (``report.*`` against the
baseline, plain significance and equivalence verdicts), and ``study.md``/``study.json``: the first screen
(:mod:`.summary`), the trajectory effect against its own base encoding (the only comparison set beside the
seed design's claims), the strength sweep against the claimed best strengths, the random-content control
with its diagnosis, where the trajectory models put their tokens, and how the numbers were made.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ....evaluation.claims import CALIBRATION, CLAIMED_IMPROVEMENT, CLAIMED_STRENGTH, CONTROL_TYPE, HARNESS_PROBLEM
from ....evaluation.evaluate_models import EvaluationResult, judge_deltas, paired_deltas
from ....evaluation.metrics import get_metric
from ....evaluation.positions import positions_markdown
from ....evaluation.report import cell as _cell
from ....evaluation.report import legend, p_text, write_report
from ....evaluation.verdicts import BETTER
from ...screen import DETAILS, json_default
from .config import StudyConfig
from .control import diagnose_control
from .summary import summary_lines

__all__ = ["best_strength", "write_study_report"]


def best_strength(per_strength: dict[float, dict], content_type: str) -> dict:
    """The strength with the largest mean delta against strength 0, whether that delta is significantly
    better (its ``significance``: Holm-adjusted across the study's comparisons), and whether it lies in the
    seed design's claimed range of best strengths."""
    cands = {s: d for s, d in per_strength.items() if s != 0.0}
    if not cands:
        return {"best": None, "significant": False, "in_claimed_range": None}
    s, d = max(cands.items(), key=lambda kv: kv[1]["delta_pct"])
    significant = d.get("significance") == BETTER
    claim = CLAIMED_STRENGTH.get(content_type, "none")
    if claim == "none":
        in_range = not significant
    else:
        lo, hi = (float(x) for x in claim.split("-"))
        in_range = significant and lo <= s <= hi
    return {"best": s if significant else 0.0, "largest_mean": s, "delta_pct": d["delta_pct"], "ci": d["ci"],
            "significant": significant, "claimed": claim, "in_claimed_range": in_range}


def _subset(result: EvaluationResult, names: list[str]) -> EvaluationResult:
    return EvaluationResult(meta=dict(result.meta), models={n: result.models[n] for n in names},
                            scores={n: result.scores[n] for n in names},
                            deltas={n: d for n, d in result.deltas.items() if n in names})


def _plot_sweep(sweep: dict, strengths: list[float], lengths: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = list(sweep)
    cols = min(4, len(types))
    rows = math.ceil(len(types) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax, t in zip(axes.flat, types, strict=False):
        for length in lengths:
            ds = [sweep[t][s].get(length) for s in strengths]
            xs = [s for s, d in zip(strengths, ds, strict=True) if d]
            ys = [d["delta_pct"] for d in ds if d]
            err = np.array([[d["delta_pct"] - d["ci"][0], d["ci"][1] - d["delta_pct"]] for d in ds if d]).T
            ax.errorbar(xs, ys, yerr=err if len(ys) else None, marker="o", capsize=3, label=f"{length} tokens")
        claim = CLAIMED_STRENGTH.get(t, "none")
        if claim != "none":
            lo, hi = (float(x) for x in claim.split("-"))
            ax.axvspan(lo, hi, color="tab:green", alpha=0.15, label="claimed best")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("strength")
        ax.set_ylabel("delta vs strength 0 (%)")
    for ax in list(axes.flat)[len(types):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_study_report(cfg: StudyConfig, result: EvaluationResult, summaries: list[dict], sweep_map: dict,
                       timing: dict, versions: dict, command: str | None,
                       control: dict[str, dict] | None = None, positions: dict | None = None) -> dict[str, Path]:
    """Write every report; ``control``: :func:`~hf_trajpe.study.control.random_control` per model,
    ``positions``: displacement statistics per trajectory model and content type."""
    out = Path(cfg.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_res, level, margin = cfg.eval.n_resamples, cfg.eval.level, cfg.equivalence_margin
    lengths = result.meta["lengths"]
    types = result.meta["content_types"]
    t = cfg.train
    training = (f"{cfg.model.get('model_type')} from scratch ({_model_shape(cfg.model)}), {t.steps} AdamW steps of "
                f"{t.batch_size} x {cfg.data.block_size} {cfg.tokenizer} tokens, lr {t.lr} (warm-up {t.warmup_steps}, "
                f"linear decay to 10%), the seven content types mixed in equal shares ({cfg.data.train} train "
                f"documents each, one draw, data seed {cfg.data.seed}, for every model seed: the seed spread holds "
                f"the initial weights and the batch order); seeds {cfg.seeds}")
    main = _subset(result, list(cfg.encodings))
    effect = {traj: {"base": base,
                     "deltas": paired_deltas(result, base, traj, n_res, level, margin=margin, claims=True)}
              for traj, base in cfg.trajectory_pairs.items()}
    pairs = {f"{m} vs {ref}": {"model": m, "reference": ref,
                               "deltas": paired_deltas(result, ref, m, n_res, level, margin=margin)}
             for m, ref in cfg.comparisons}
    sweep, best, per = {}, {}, {}
    if sweep_map:
        ref = sweep_map[0.0]
        per = {s: (paired_deltas(result, ref, name, n_res, level, margin=margin) if name != ref else None)
               for s, name in sweep_map.items()}
        for ctype in types:
            sweep[ctype] = {s: (per[s][ctype] if per[s] else {}) for s in sweep_map}

    compared = [(m, cfg.baseline, per_t) for m, per_t in main.deltas.items()]
    compared += [(m, v["base"], v["deltas"]) for m, v in effect.items()]
    compared += [(v["model"], v["reference"], v["deltas"]) for v in pairs.values()]
    swept = [(sweep_map[s], sweep_map[0.0], d) for s, d in (per.items() if sweep_map else []) if d]
    family = judge_deltas(compared + swept, margin, level, correction=cfg.correction)  # across every comparison shown
    if sweep_map:
        for ctype in types:
            best[ctype] = {str(length): best_strength({s: sweep[ctype][s][length] for s in sweep_map if s != 0.0},
                                                       ctype) for length in lengths}
    rows = [(m, ref, length, d) for m, ref, per_t in compared for length, d in per_t.get(CONTROL_TYPE, {}).items()]
    diagnosis = diagnose_control(rows, control or {}, cfg.eval.calibrated_mass)
    calibration = {(m, ref, L) for m, ref, L in diagnosis["calibration"]}
    for m, ref, L, d in rows:
        if (m, ref, L) in calibration:
            d["control_flag"], d["verdict"] = HARNESS_PROBLEM, CALIBRATION
    summary = summary_lines(cfg, types, lengths, effect, main.deltas, diagnosis, pairs, family)
    main.meta.update({"family_size": family, "training": training, "command": command, "versions": versions,
                      "control": diagnosis,
                      "summary_md": summary, "positions": positions or {},
                      "title": f"# Study `{cfg.name}`: every encoding against `{cfg.baseline}`"})
    paths = write_report(main, out)
    if sweep_map:
        paths["sweep_png"] = out / "sweep.png"
        _plot_sweep(sweep, [s for s in sweep_map if s != 0.0], lengths, paths["sweep_png"])

    data = {"meta": {**main.meta, "study": cfg.name, "timing": timing, "config": cfg.to_dict()},
            "baseline": cfg.baseline,
            "trajectory_effect": {k: {"base": v["base"], "deltas": _str_keys(v["deltas"])} for k, v in effect.items()},
            "comparisons": {k: {**v, "deltas": _str_keys(v["deltas"])} for k, v in pairs.items()},
            "sweep": {"models": {str(s): n for s, n in sweep_map.items()},
                      "deltas_vs_strength_0": {ct: {str(s): _str_keys(v) for s, v in per_s.items()}
                                               for ct, per_s in sweep.items()},
                      "best_strength": best},
            "random_control": control or {},
            "control_diagnosis": diagnosis,
            "positions": positions or {},
            "training": sorted(summaries, key=lambda s: (s["name"], s["seed"]))}
    paths["study_json"] = out / "study.json"
    paths["study_json"].write_text(json.dumps(data, indent=2, default=json_default) + "\n")
    paths["study_md"] = out / "study.md"
    paths["study_md"].write_text(_markdown(cfg, main, effect, sweep, best, sweep_map, control or {}, summaries,
                                           timing, versions, command, training, diagnosis, rows, summary,
                                           positions or {}))
    return paths


def _ruled_out(per_length: dict, content_type: str) -> str:
    claim = CLAIMED_IMPROVEMENT.get(content_type)
    if claim is None or content_type == CONTROL_TYPE:
        return "n/a"
    out = [str(L) for L, d in per_length.items() if d["ci"][1] < claim[0]]
    return ", ".join(out) if out else "none"


def _model_shape(m: dict) -> str:
    keys = [("n_layer", "layers"), ("num_hidden_layers", "layers"), ("n_embd", "wide"), ("hidden_size", "wide"),
            ("n_head", "heads"), ("num_attention_heads", "heads")]
    return ", ".join(f"{m[k]} {w}" for k, w in keys if k in m)


def _str_keys(d: dict) -> dict:
    return {str(k): (_str_keys(v) if isinstance(v, dict) and v and not isinstance(next(iter(v)), str) else v)
            for k, v in d.items()}


def _wall(timing: dict, summaries: list[dict]) -> str:
    sessions = timing.get("training_sessions") or []
    if sessions:
        train = sum(s["wall_seconds"] for s in sessions)
        how = f"training {train / 60:.1f} min ({sum(s['models'] for s in sessions)} models, {len(sessions)} session(s))"
    else:
        busy = sum(s["train_seconds"] for s in summaries)
        how = f"training time not recorded here (sum over models: {busy / 60:.1f} process-minutes)"
    return (f"- wall time: {how}; evaluation and reports {timing['eval_wall_seconds'] / 60:.1f} min "
            f"(this invocation: {timing['total_wall_seconds'] / 60:.1f} min)")


def _control_md(control: dict[str, dict], diagnosis: dict) -> list[str]:
    if not control:
        return [diagnosis.get("finding", "")] if diagnosis.get("finding") else []
    early = next(k for k in next(iter(control.values())) if k.startswith("perplexity_after_"))
    floor = next(iter(control.values()))["floor"]
    lines = ["", f"Diagnosis ({next(iter(control.values()))['n_tokens']} tokens per model, mean over seeds; the floor "
             f"is the alphabet size, {floor}; a model with less than {diagnosis.get('calibrated_mass', 0.99):.0%} "
             "of its probability on the alphabet is under-trained on random content):", "",
             "| model | perplexity | probability on the alphabet | perplexity within the alphabet | "
             f"perplexity after position {early.rsplit('_', 1)[1]} |", "|---|---:|---:|---:|---:|"]
    ppl = get_metric("perplexity").format
    for n, c in control.items():
        lines.append(f"| `{n}` | {ppl(c['perplexity'])} | {c['alphabet_mass']:.3f} | "
                     f"{ppl(c['perplexity_within_alphabet'])} | {ppl(c[early])} |")
    return lines + ["", f"**Verdict on the control ({diagnosis['status']}):** {diagnosis['finding']}"]


def _markdown(cfg, main, effect, sweep, best, sweep_map, control, summaries, timing, versions, command,
              training, diagnosis, status, summary, positions) -> str:
    types = main.meta["content_types"]
    lengths = main.meta["lengths"]
    lines = [f"# Study `{cfg.name}`: positional encodings per content type", ""] + summary
    lines += [DETAILS, "",
              f"- command: `{command or 'hf-trajpe study --config ...'}`",
              f"- training: {training}",
              f"- evaluation: test splits ({cfg.data.test} documents per type), {len(lengths)} context lengths "
              f"({', '.join(map(str, lengths))} tokens = {', '.join(f'{m}x' for m in main.meta['length_multipliers'])} "
              f"the training length), {cfg.eval.max_sequences} sequences per type at the longest",
              f"- cells: delta of perplexity in percent, `(ppl_ref - ppl) / ppl_ref`, positive = better than the "
              f"reference; [{cfg.eval.level:.0%} interval: Student's t over seeds, paired seed by seed, plus the "
              "spread over test sequences]; " + legend(cfg.equivalence_margin, "%", main.meta.get("family_size")),
              "- not adjusted: the claim verdicts (a 95% interval set against a claimed range) and the "
              "random-content alarm (an improvement there is flagged on its own interval)",
              _wall(timing, summaries),
              "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), ""]
    for length in lengths:
        lines += [f"### Against `{cfg.baseline}` at {length} tokens", "",
                  "| type | " + " | ".join(f"`{n}`" for n in main.deltas) + " |",
                  "|---|" + "---:|" * len(main.deltas)]
        for t in types:
            lines.append(f"| {t} | " + " | ".join(_cell(main.deltas[n][t].get(length)) for n in main.deltas) + " |")
        lines.append("")
    if effect:
        lines += ["### Trajectory against its own base encoding", "",
                  "The seed design's claims are about adding trajectory guidance to an encoding, so the fair "
                  "reference for each trajectory model is the same encoding without it (same seeds, same data).", ""]
        for traj, v in effect.items():
            head = " | ".join(f"{L} tokens" for L in lengths)
            lines += [f"#### `{traj}` against `{v['base']}`", "",
                      f"| type | claimed | {head} | p, p (Holm) (first length) | verdict (first length) | "
                      "claim (first length) | claim ruled out at |",
                      "|---|---|" + "---:|" * len(lengths) + "---:|---|---|---|"]
            for t in types:
                c = CLAIMED_IMPROVEMENT.get(t)
                claim = f"{c[0]:g}-{c[1]:g}%" if c else "none"
                first = v["deltas"][t].get(lengths[0])
                verdicts = (f"{p_text(first.get('p_value'))}, {p_text(first.get('p_holm'))} | {first['verdict']} | "
                            f"{first['claim_verdict']}") if first else "n/a | n/a | n/a"
                lines.append(f"| {t} | {claim} | " + " | ".join(_cell(v["deltas"][t].get(L)) for L in lengths)
                             + f" | {verdicts} | {_ruled_out(v['deltas'][t], t)} |")
            lines += ["", "*Claim ruled out at*: the lengths where the whole interval lies below the claimed "
                      "range (the claimed improvement is excluded, even when the difference is not significant).",
                      ""]
    if sweep:
        strengths = [s for s in sweep_map if s != 0.0]
        L0 = lengths[0]
        lines += [f"### Strength sweep: trajectory against strength 0 at {L0} tokens", "",
                  "Strength 0 is the base encoding exactly; models: "
                  + ", ".join(f"{s:g} = `{n}`" for s, n in sweep_map.items()) + ".", "",
                  "| type | " + " | ".join(f"{s:g}" for s in strengths)
                  + " | best (significant) | claimed best | agrees |",
                  "|---|" + "---:|" * len(strengths) + "---:|---|---|"]
        for t in types:
            b = best[t][str(L0)]
            agree = {True: "yes", False: "no", None: "n/a"}[b["in_claimed_range"]]
            lines.append(f"| {t} | " + " | ".join(_cell(sweep[t][s].get(L0)) for s in strengths)
                         + f" | {b['best']:g} | {b['claimed']} | {agree} |")
        lines += ["", "Best strength at every length (0 = no strength significantly better than 0):", "",
                  "| type | " + " | ".join(f"{L} tokens" for L in lengths) + " | claimed |",
                  "|---|" + "---:|" * len(lengths) + "---|"]
        for t in types:
            lines.append(f"| {t} | " + " | ".join(f"{best[t][str(L)]['best']:g}" for L in lengths)
                         + f" | {CLAIMED_STRENGTH.get(t, 'none')} |")
        lines += ["", "![strength sweep](sweep.png)", ""]
    if positions:
        lines += [f"### Where the trajectory models put their tokens ({lengths[0]} tokens, test data)", "",
                  "Step `p_i - p_(i-1)` (1 for integer positions) and its coefficient of variation (near 0: the "
                  "positions are a rescaled index, nothing content-dependent to use), displacement `p_i - i` "
                  "(mean over tokens, max), share of positions clamped at the position limit; mean over seeds.", ""]
        lines += positions_markdown(positions)
    lines += ["### The random-content control", "",
              "Uniform random characters: no encoding can lower their perplexity below the alphabet's. A "
              "significant improvement here is calibration when the models are under-trained, and a broken "
              "harness when they are not.", "",
              "| model (reference) | length | delta | verdict |", "|---|---:|---:|---|"]
    for m, ref, L, d in status:
        lines.append(f"| `{m}` (`{ref}`) | {L} | {_cell(d)} | {d['verdict']} |")
    lines += _control_md(control, diagnosis) + [""]
    lines += ["### Training", "", "| model | seeds | final train loss (mean) | tokens/s per process (mean) |",
              "|---|---:|---:|---:|"]
    by: dict[str, list[dict]] = {}
    for s in summaries:
        by.setdefault(s["name"], []).append(s)
    for n, ss in by.items():
        loss = get_metric("cross_entropy").format(np.mean([s["final_loss"] for s in ss]))
        lines.append(f"| `{n}` | {len(ss)} | {loss} | "
                     f"{np.mean([s['tokens_per_second'] for s in ss]):,.0f} |")
    lines += ["", f"Full evaluation report against `{cfg.baseline}` (perplexity, accuracy, charts): "
              "[report.md](report.md).", ""]
    return "\n".join(lines)
