"""The study's reports: the evaluation report of the main encodings (``report.*`` against the
baseline), and ``study.md``/``study.json``: the trajectory effect against its own base encoding, the
strength sweep against the seed design's claimed best strengths, the random-content control, and
how the numbers were made (command, versions, timings).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..evaluation.claims import CLAIMED_IMPROVEMENT, CLAIMED_STRENGTH, CONTROL_TYPE, HARNESS_PROBLEM
from ..evaluation.evaluate_models import EvaluationResult, paired_deltas
from ..evaluation.report import write_report
from .config import StudyConfig

__all__ = ["write_study_report", "best_strength"]


def best_strength(per_strength: dict[float, dict], content_type: str) -> dict:
    """The strength with the largest mean delta against strength 0, whether that delta is significant,
    and whether it lies in the seed design's claimed range of best strengths."""
    cands = {s: d for s, d in per_strength.items() if s != 0.0}
    if not cands:
        return {"best": None, "significant": False, "in_claimed_range": None}
    s, d = max(cands.items(), key=lambda kv: kv[1]["delta_pct"])
    significant = d["ci"][0] > 0
    claim = CLAIMED_STRENGTH.get(content_type, "none")
    if claim == "none":
        in_range = not significant
    else:
        lo, hi = (float(x) for x in claim.split("-"))
        in_range = significant and lo <= s <= hi
    return {"best": s if significant else 0.0, "largest_mean": s, "delta_pct": d["delta_pct"], "ci": d["ci"],
            "significant": significant, "claimed": claim, "in_claimed_range": in_range}


def _cell(d: dict | None) -> str:
    if not d:
        return "n/a"
    lo, hi = d["ci"]
    mark = "" if lo <= 0 <= hi else (" ▲" if lo > 0 else " ▼")
    return f"{d['delta_pct']:+.1f} [{lo:+.1f}, {hi:+.1f}]{mark}"


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
                       control: dict[str, dict] | None = None) -> dict[str, Path]:
    out = Path(cfg.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_res, level = cfg.eval.n_resamples, cfg.eval.level
    lengths = result.meta["lengths"]
    t = cfg.train
    training = (f"{cfg.model.get('model_type')} from scratch ({_model_shape(cfg.model)}), {t.steps} AdamW steps of "
                f"{t.batch_size} x {cfg.data.block_size} {cfg.tokenizer} tokens, lr {t.lr} (warm-up {t.warmup_steps}, "
                f"linear decay to 10%), the seven content types mixed in equal shares ({cfg.data.train} train "
                f"documents each); seeds {cfg.seeds}")
    main = _subset(result, list(cfg.encodings))
    main.meta.update({"training": training, "command": command, "versions": versions})
    paths = write_report(main, out)

    effect = {traj: {"base": base, "deltas": paired_deltas(result, base, traj, n_res, level)}
              for traj, base in cfg.trajectory_pairs.items()}
    sweep, best = {}, {}
    if sweep_map:
        ref = sweep_map[0.0]
        per = {s: (paired_deltas(result, ref, name, n_res, level) if name != ref else None)
               for s, name in sweep_map.items()}
        for ctype in result.meta["content_types"]:
            sweep[ctype] = {s: (per[s][ctype] if per[s] else {}) for s in sweep_map}
            best[ctype] = {str(length): best_strength({s: sweep[ctype][s][length] for s in sweep_map if s != 0.0},
                                                       ctype) for length in lengths}
        paths["sweep_png"] = out / "sweep.png"
        _plot_sweep(sweep, [s for s in sweep_map if s != 0.0], lengths, paths["sweep_png"])

    compared = {**main.deltas, **{k: v["deltas"] for k, v in effect.items()}}
    rows = [(m, length, d) for m, per_t in compared.items() for length, d in per_t.get(CONTROL_TYPE, {}).items()]
    data = {"meta": {**main.meta, "study": cfg.name, "timing": timing, "config": cfg.to_dict()},
            "baseline": cfg.baseline,
            "trajectory_effect": {k: {"base": v["base"], "deltas": _str_keys(v["deltas"])} for k, v in effect.items()},
            "sweep": {"models": {str(s): n for s, n in sweep_map.items()},
                      "deltas_vs_strength_0": {ct: {str(s): _str_keys(v) for s, v in per_s.items()}
                                               for ct, per_s in sweep.items()},
                      "best_strength": best},
            "random_control": control or {},
            "training": sorted(summaries, key=lambda s: (s["name"], s["seed"]))}
    paths["study_json"] = out / "study.json"
    paths["study_json"].write_text(json.dumps(data, indent=2, default=json_default) + "\n")
    paths["study_md"] = out / "study.md"
    paths["study_md"].write_text(_markdown(cfg, main, effect, sweep, best, sweep_map, rows, summaries, timing,
                                           versions, command, training, control or {}))
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


def json_default(x):
    """``json.dumps`` default for report data: NumPy scalars as numbers, tuples as lists, else text."""
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, tuple):
        return list(x)
    return str(x)


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


def _control_md(control: dict[str, dict], rows: list, level: float) -> list[str]:
    if not control:
        return []
    early = next(k for k in next(iter(control.values())) if k.startswith("perplexity_after_"))
    floor = next(iter(control.values()))["floor"]
    lines = ["", f"Diagnosis ({next(iter(control.values()))['n_tokens']} tokens per model, mean over seeds; the floor "
             f"is the alphabet size, {floor}):", "",
             "| model | perplexity | probability on the alphabet | perplexity within the alphabet | "
             f"perplexity after position {early.rsplit('_', 1)[1]} |", "|---|---:|---:|---:|---:|"]
    for n, c in control.items():
        lines.append(f"| `{n}` | {c['perplexity']:.2f} | {c['alphabet_mass']:.3f} | "
                     f"{c['perplexity_within_alphabet']:.2f} | {c[early]:.2f} |")
    below = [n for n, c in control.items() if c["perplexity"] < floor * 0.99]
    flagged = [r for r in rows if r[2]["verdict"] == HARNESS_PROBLEM]
    lo = min(c["alphabet_mass"] for c in control.values())
    hi = max(c["alphabet_mass"] for c in control.values())
    worst = max(c["perplexity"] for c in control.values())
    if below:
        lines += ["", f"**Harness broken:** {', '.join(below)} beat the floor of {floor}: no model can; look for a "
                  "leak between training and test data."]
    elif flagged:
        lines += ["", f"**Verdict on the control:** no model beats the floor, and the flagged improvements are "
                  f"calibration, not position: the models put {lo:.1%}-{hi:.1%} of their probability on the random "
                  f"alphabet (the rest on tokens random content never contains) and are not uniform within it; the "
                  f"worst is {worst:.1f} against {floor}. A model that learns this faster looks better on random "
                  "content. The differences shrink as training converges; read the structured types with this "
                  "margin in mind."]
    else:
        lines += ["", f"**Verdict on the control:** no significant improvement on random content at {level:.0%}, "
                  f"and no model beats the floor of {floor}."]
    return lines


def _markdown(cfg, main, effect, sweep, best, sweep_map, control, summaries, timing, versions, command,
              training, diagnosis) -> str:
    types = main.meta["content_types"]
    lengths = main.meta["lengths"]
    lines = [f"# Study `{cfg.name}`: positional encodings per content type", ""]
    harness = [(m, L, d) for m, L, d in control if d["verdict"] == HARNESS_PROBLEM]
    if harness:
        lines += ["> **⚠ HARNESS PROBLEM:** a significant improvement on `random_content`:", ">"]
        lines += [f"> - `{m}` at {L} tokens: {_cell(d)}" for m, L, d in harness]
        lines.append("")
    lines += [f"- command: `{command or 'hf-trajpe study --config ...'}`",
              f"- training: {training}",
              f"- evaluation: test splits ({cfg.data.test} documents per type), {len(lengths)} context lengths "
              f"({', '.join(map(str, lengths))} tokens = {', '.join(f'{m}x' for m in main.meta['length_multipliers'])} "
              f"the training length), {cfg.eval.max_sequences} sequences per type at the longest",
              f"- cells: delta of perplexity in percent, `(ppl_ref - ppl) / ppl_ref`, positive = better than the "
              f"reference; [{cfg.eval.level:.0%} bootstrap interval over test sequences and seeds]; "
              "▲ significantly better, ▼ significantly worse",
              _wall(timing, summaries),
              "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), ""]
    for length in lengths:
        lines += [f"## Against `{cfg.baseline}` at {length} tokens", "",
                  "| type | " + " | ".join(f"`{n}`" for n in main.deltas) + " |",
                  "|---|" + "---:|" * len(main.deltas)]
        for t in types:
            lines.append(f"| {t} | " + " | ".join(_cell(main.deltas[n][t].get(length)) for n in main.deltas) + " |")
        lines.append("")
    if effect:
        lines += ["## Trajectory against its own base encoding", "",
                  "The seed design's claims are about adding trajectory guidance to an encoding, so the fair "
                  "reference for each trajectory model is the same encoding without it (same seeds, same data).", ""]
        for traj, v in effect.items():
            head = " | ".join(f"{L} tokens" for L in lengths)
            lines += [f"### `{traj}` against `{v['base']}`", "",
                      f"| type | claimed | {head} | verdict (first length) | claim ruled out at |",
                      "|---|---|" + "---:|" * len(lengths) + "---|---|"]
            for t in types:
                c = CLAIMED_IMPROVEMENT.get(t)
                claim = f"{c[0]:g}-{c[1]:g}%" if c else "none"
                first = v["deltas"][t].get(lengths[0])
                lines.append(f"| {t} | {claim} | " + " | ".join(_cell(v["deltas"][t].get(L)) for L in lengths)
                             + f" | {first['verdict'] if first else 'n/a'} | {_ruled_out(v['deltas'][t], t)} |")
            lines += ["", "*Claim ruled out at*: the lengths where the whole interval lies below the claimed "
                      "range (the claimed improvement is excluded, even when the difference is not significant).",
                      ""]
    if sweep:
        strengths = [s for s in sweep_map if s != 0.0]
        L0 = lengths[0]
        lines += [f"## Strength sweep: trajectory against strength 0 at {L0} tokens", "",
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
    lines += ["## The random-content control", "",
              "Uniform random bytes: no encoding can lower their perplexity below the alphabet's; a significant "
              "improvement here means the harness is wrong.", "",
              "| model (reference) | length | delta | verdict |", "|---|---:|---:|---|"]
    for m, L, d in control:
        ref = effect[m]["base"] if m in effect else cfg.baseline
        lines.append(f"| `{m}` (`{ref}`) | {L} | {_cell(d)} | {d['verdict']} |")
    lines += _control_md(diagnosis, control, cfg.eval.level) + [""]
    lines += ["## Training", "", "| model | seeds | final train loss (mean) | tokens/s per process (mean) |",
              "|---|---:|---:|---:|"]
    by: dict[str, list[dict]] = {}
    for s in summaries:
        by.setdefault(s["name"], []).append(s)
    for n, ss in by.items():
        lines.append(f"| `{n}` | {len(ss)} | {np.mean([s['final_loss'] for s in ss]):.3f} | "
                     f"{np.mean([s['tokens_per_second'] for s in ss]):,.0f} |")
    lines += ["", f"Full evaluation report against `{cfg.baseline}` (perplexity, accuracy, charts): "
              "[report.md](report.md).", ""]
    return "\n".join(lines)
