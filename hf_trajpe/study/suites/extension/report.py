"""The extension study's report: ``study.md`` (first screen, then details) and ``study.json`` in
``report_dir``, and the real model's long-context report (``real/long_context.md``, ``.json``) beside them.

Tables: perplexity of each method (mean over seeds, 95% interval over seeds and sequences), and the paired
comparisons (:mod:`.eval`) with the config's declared correction (Benjamini-Hochberg or Holm; the other is
shown beside it) across the comparisons of one table, for the differences and the equivalence tests alike;
the report opens with the declared analysis plan and the changes made to it after a first look. The
orderings the literature reports (``published`` in the config) are read off the comparisons: reproduced
(significant in the stated direction after adjustment), contradicted (significant the other way), equivalent
within the margin (neither way), or not resolved; under each correction.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ....evaluation.verdicts import correction_name
from ...plan import plan_lines
from ...screen import DETAILS, json_default
from .eval import SCORES, adjust, compare, perplexity

__all__ = ["write_extension_report", "comparisons_of", "pooled"]

ALL = "all types"


def pooled(cell_by_type: dict) -> dict:
    """The per-type cells of one read pooled: each seed's sequences of every type, concatenated."""
    kinds = sorted(cell_by_type)
    return {key: [np.concatenate([cell_by_type[k][key][s] for k in kinds])
                  for s in range(len(cell_by_type[kinds[0]][key]))] for key in SCORES}


def _cells(scores: dict) -> dict:
    """``{method: {factor: {type | ALL: cell}}}`` with the pooled cell added."""
    return {m: {f: {**per_type, ALL: pooled(per_type)} for f, per_type in by_f.items()} for m, by_f in scores.items()}


def comparisons_of(cfg, scores: dict, pairs: list[tuple[str, str]], kind: str = ALL, key: str = "whole") -> list[dict]:
    """Every pair at every factor on ``kind``, their p-values adjusted together (``cfg.correction``)."""
    cells = _cells(scores)
    out = []
    for model, ref in pairs:
        if model not in cells or ref not in cells:
            continue
        for f in cells[model]:
            c = compare(cells[model][f][kind][key], cells[ref][f][kind][key], cfg.equivalence_margin, cfg.eval.level)
            out.append({"model": model, "reference": ref, "factor": f, "kind": kind, "score": key, **c})
    adjust(out, cfg.eval.level, cfg.correction)
    return out


def _mark(c: dict, correction: str | None = None) -> str:
    v = c["verdict"] if correction is None else c[f"verdict_{correction}"]
    equal = "=" if "; equivalent" in v or "yet equivalent" in v else ""
    if v.startswith("better"):
        return "▲" + equal
    if v.startswith("worse"):
        return "▼" + equal
    return equal or "?"


def _ppl_table(cfg, scores: dict, kind: str, key: str) -> list[str]:
    cells = _cells(scores)
    factors = list(next(iter(cells.values())))
    T = cfg.data.block_size
    lines = ["| method | " + " | ".join(f"{float(f):g}x ({int(round(float(f) * T))} tokens)" for f in factors) + " |",
             "|---|" + "---:|" * len(factors)]
    for m, by_f in cells.items():
        row = []
        for f in factors:
            p = perplexity(by_f[f][kind][key], cfg.eval.level)
            row.append(f"{p['ppl']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]")
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return lines


def _cmp_table(comps: list[dict], other: str | None = None) -> list[str]:
    """Each comparison with its interval and mark; ``other``: a correction whose mark is shown beside, in
    parentheses, where it differs."""
    if not comps:
        return []
    factors = list(dict.fromkeys(c["factor"] for c in comps))
    pairs = list(dict.fromkeys((c["model"], c["reference"]) for c in comps))
    by = {(c["model"], c["reference"], c["factor"]): c for c in comps}
    lines = ["| model vs reference | " + " | ".join(f"{float(f):g}x" for f in factors) + " |",
             "|---|" + "---:|" * len(factors)]
    for m, r in pairs:
        row = []
        for f in factors:
            c = by.get((m, r, f))
            beside = ""
            if c is not None and other is not None and _mark(c, other) != _mark(c):
                beside = f" ({_mark(c, other)} {correction_name(other)})"
            row.append("" if c is None else
                       f"{c['value']:+.1f}% [{c['ci'][0]:+.1f}, {c['ci'][1]:+.1f}] {_mark(c)}{beside}")
        lines.append(f"| {m} vs {r} | " + " | ".join(row) + " |")
    return lines


def _chosen_lines(cfg, chosen: dict, title: str) -> list[str]:
    """What each method that chooses an option on validation chose, per factor and seed, and from what."""
    from .config import choice_of

    lines = []
    for method, by_f in chosen.items():
        option, values = choice_of(cfg.methods[method])
        lines += [f"### {title}: {method} chooses {option} on validation\n",
                  f"From {', '.join(map(repr, values))}: per seed and factor, the value whose read has the lowest loss "
                  f"over {cfg.eval.validation_sequences or cfg.eval.max_sequences} validation sequences per type (of "
                  f"{cfg.data.validation} validation documents per type, disjoint from the test documents); the test "
                  "split is then read with it.\n",
                  "| factor | " + " | ".join(f"seed {c['seed']}" for c in next(iter(by_f.values()))) + " |",
                  "|---|" + "---:|" * len(next(iter(by_f.values())))]
        lines += [f"| {float(f):g}x | " + " | ".join(f"{c['value']!r}" for c in cells) + " |"
                  for f, cells in by_f.items()]
        lines.append("")
    return lines


def _state(verdict: str) -> str:
    if verdict.startswith("better"):
        return "reproduced"
    if verdict.startswith("worse"):
        return "contradicted"
    return "equivalent within the margin (neither way)" if "; equivalent" in verdict else "not resolved"


def _published(cfg, comps: dict[str, list[dict]]) -> list[str]:
    other = "holm" if cfg.correction == "bh" else "bh"
    lines = []
    for claim in cfg.published:
        part = claim.get("part", "pretrain")
        found = [c for c in comps.get(part, [])
                 if c["model"] == claim["model"] and c["reference"] == claim["reference"]]
        if not found:
            lines.append(f"- {claim['claim']}: not measured (no {claim['model']} vs {claim['reference']} in {part})")
            continue
        words = []
        for c in found:
            state, beside = _state(c["verdict"]), _state(c.get(f"verdict_{other}", c["verdict"]))
            also = "" if beside == state else f"; {correction_name(other)}: {beside}"
            words.append(f"{float(c['factor']):g}x {state} ({c['value']:+.1f}% [{c['ci'][0]:+.1f}, "
                         f"{c['ci'][1]:+.1f}]{also})")
        lines.append(f"- {claim['claim']} ({claim['model']} better than {claim['reference']}, "
                     f"{'zero-shot' if part == 'pretrain' else 'after fine-tuning'}): " + "; ".join(words))
    return lines


def _changed_calls(cfg, comps: dict[str, list[dict]]) -> list[str]:
    """The comparisons whose verdict differs between the declared correction and the other one."""
    other = "holm" if cfg.correction == "bh" else "bh"
    rows = [(part, c) for part, cs in comps.items() for c in cs if c[f"verdict_{other}"] != c["verdict"]]
    n = sum(len(cs) for cs in comps.values())
    head = (f"Under {correction_name(other)} instead of {correction_name(cfg.correction)}, {len(rows)} of the {n} "
            "verdicts change" + (":" if rows else "."))
    return [head, ""] + [f"- {part}, {c['model']} vs {c['reference']} at {float(c['factor']):g}x: {c['verdict']} "
                         f"(p {c[f'p_{cfg.correction}']:.2g}) -> {c[f'verdict_{other}']} (p {c[f'p_{other}']:.2g})"
                         for part, c in rows] + [""]


def _sentences(comps: list[dict], pairs: list[list[str]], when: str) -> list[str]:
    lines = []
    for m, r in pairs:
        for c in comps:
            if c["model"] == m and c["reference"] == r:
                lines.append(f"- {when}, {m} vs {r} at {float(c['factor']):g}x: {c['value']:+.1f}% perplexity "
                             f"[{c['ci'][0]:+.1f}, {c['ci'][1]:+.1f}], {c['verdict']}")
    return lines


def _real_lines(real: dict) -> list[str]:
    names = list(real["models"])
    first = real["models"][names[0]]["windows"]["all"]
    lines = ["| method | " + " | ".join(w["label"] for w in first) + " |", "|---|" + "---:|" * len(first)]
    for n in names:
        ws = real["models"][n]["windows"]["all"]
        cells = (f"{w['ppl']:.2f} [{w['ci'][0]:.2f}, {w['ci'][1]:.2f}]" for w in ws)
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    keys = {n: real["models"][n]["passkey"] for n in names if real["models"][n]["passkey"]}
    if keys:
        cells = [(p["length"], p["depth"]) for p in next(iter(keys.values()))]
        lines += ["", "Passkey retrieval (right / trials, greedy):", "",
                  "| method | " + " | ".join(f"{n} tok, depth {d:g}" for n, d in cells) + " |",
                  "|---|" + "---:|" * len(cells)]
        lines += [f"| {n} | " + " | ".join(f"{r['right']}/{r['trials']}" for r in rows) + " |"
                  for n, rows in keys.items()]
    return lines


def write_extension_report(cfg, results: dict, summaries: list[dict], timing: dict, versions: dict,
                           command: str | None) -> dict[str, Path]:
    from ....evaluation.long_context_run import write_long_context_report

    out = Path(cfg.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    T, seeds = cfg.data.block_size, cfg.seeds
    ref = cfg.reference
    pairs = [(m, ref) for m in cfg.methods if m != ref] + [tuple(p) for p in cfg.comparisons]
    pairs += [(c["model"], c["reference"]) for c in cfg.published]
    pairs = list(dict.fromkeys(pairs))
    comps: dict[str, list[dict]] = {}
    md = [f"# Context extension study: {cfg.name}\n",
          f"Small RoPE models ({cfg.model.get('model_type')}, {cfg.model.get('num_hidden_layers')} layers, "
          f"{cfg.model.get('hidden_size')} wide) trained at T = {T} tokens on the seven content types mixed, "
          f"{len(seeds)} seed(s) ({cfg.train.steps} steps), then read at "
          f"{', '.join(f'{f:g}x' for f in cfg.eval.factors)} T with each method. Perplexity of every token of "
          f"{cfg.eval.max_sequences} test sequences per type, mean over seeds [95% interval: Student's t over seeds "
          "plus the sequences' standard error]. Comparisons: percent change of perplexity (positive: lower than the "
          f"reference), ▲/▼ significant after {correction_name(cfg.correction)}'s adjustment across the comparisons "
          f"of the table, = equivalent within "
          f"±{cfg.equivalence_margin:g}% (two one-sided tests, adjusted the same way), ? neither; in parentheses "
          f"the mark under {correction_name('holm' if cfg.correction == 'bh' else 'bh')} where it differs.\n"]
    other = "holm" if cfg.correction == "bh" else "bh"
    for part in ("pretrain", "finetune"):
        if part in results:
            scores = results[part]["scores"]
            comps[part] = comparisons_of(cfg, scores, [p for p in pairs if p[0] in scores and p[1] in scores])
    md += plan_lines(cfg.seeds, cfg.equivalence_margin, "%", cfg.correction, cfg.analysis,
                     max((len(c) for c in comps.values()), default=0))
    for part, title in (("pretrain", "Zero-shot"), ("finetune", "After fine-tuning")):
        if part not in results:
            continue
        scores = results[part]["scores"]
        if part == "finetune":
            ft = cfg.finetune
            title += f" at {ft.factor:g}x T ({ft.steps} steps, lr {ft.lr:g}; read as fine-tuned)"
        md += [f"## {title}: perplexity, all types pooled\n", *_ppl_table(cfg, scores, ALL, "whole"), "",
               f"### {title}: comparisons\n", *_cmp_table(comps[part], other), ""]
        md += _chosen_lines(cfg, results[part].get("chosen") or {}, title)
        learned: dict[str, list[str]] = {}
        for run in summaries:
            if run.get("part") == part and "learned_strength" in run:
                learned.setdefault(run["name"], []).append(f"{run['learned_strength']:.3f} (seed {run['seed']})")
        if learned:
            md += ["Learned strength at the end of the fine-tune (it started at the method's strength): "
                   + "; ".join(f"{name}: {', '.join(values)}" for name, values in learned.items()) + ".", ""]
    if cfg.comparisons:
        md += ["## Verdicts\n"]
        for part in comps:
            md += _sentences(comps[part], cfg.comparisons, "zero-shot" if part == "pretrain" else "fine-tuned")
        md.append("")
    if cfg.published:
        md += ["## Orderings reported in the literature\n", *_published(cfg, comps), ""]
    if comps:
        md += [f"## {correction_name(other)} beside {correction_name(cfg.correction)}\n", *_changed_calls(cfg, comps)]
    paths: dict[str, Path] = {}
    if "real" in results:
        real = results["real"]
        paths.update({f"real_{k}": v for k, v in write_long_context_report(real, out / "real").items()})
        md += [f"## Real model: {cfg.real.model}, {real['length']} tokens, factor {cfg.real.factor:g}\n",
               f"Trained length {real['trained_length']}; perplexity per window of position (multiples of it), "
               f"documents: {', '.join(f'{k}: {len(v)}' for k, v in real['documents'].items())}; in brackets the 95% "
               "bootstrap over documents, which with two documents is the range of their two values, not an "
               "interval. Per kind: [real/long_context.md](real/long_context.md).\n",
               *_real_lines(real), ""]
    elif cfg.real is not None:
        md += [f"## Real model: not read ({cfg.real.model})\n",
               f"The study skipped the real model: {cfg.real_model_problem() or 'it could not be read'}. Make "
               "`real.model` available (or remove the `real` section) and run the study again: the trained "
               "models are reused.\n"]
    md += [DETAILS, ""]
    for part in ("pretrain", "finetune"):
        if part not in results:
            continue
        scores = results[part]["scores"]
        kinds = sorted(next(iter(next(iter(scores.values())).values())))
        md += [f"### {part}: perplexity of the tokens past T, all types pooled\n",
               *_ppl_table(cfg, scores, ALL, "past"), ""]
        for kind in kinds:
            c = comparisons_of(cfg, scores, [p for p in pairs if p[0] in scores and p[1] in scores], kind)
            md += [f"### {part}: {kind}\n", *_ppl_table(cfg, scores, kind, "whole"), "", *_cmp_table(c), ""]
    cpu = {p: round(r.get("eval_cpu_seconds", 0.0), 1) for p, r in results.items()}
    train_cpu = sum(s.get("train_seconds", 0.0) * s.get("threads", 1) for s in summaries)
    md += ["### Time\n", f"- evaluation CPU seconds per part: {cpu}",
           f"- training: {len(summaries)} models, {train_cpu:.0f} thread-seconds of training",
           f"- wall seconds: {timing.get('total_wall_seconds', 0):.0f}",
           f"- versions: {json.dumps(versions)}", ""]
    if command:
        md += [f"Command: `{command}`", ""]
    paths["study_md"] = out / "study.md"
    paths["study_json"] = out / "study.json"
    paths["study_md"].write_text("\n".join(md) + "\n")
    data = {"config": cfg.to_dict(), "comparisons": comps, "timing": timing, "versions": versions, "command": command,
            "summaries": summaries, "eval_cpu_seconds": cpu,
            "perplexity": {part: {m: {f: {k: perplexity(c["whole"], cfg.eval.level) for k, c in by_k.items()}
                                      for f, by_k in by_f.items()}
                                  for m, by_f in _cells(results[part]["scores"]).items()}
                           for part in ("pretrain", "finetune") if part in results},
            "scores": {part: results[part]["scores"] for part in ("pretrain", "finetune") if part in results},
            "chosen": {part: results[part]["chosen"] for part in ("pretrain", "finetune")
                       if results.get(part, {}).get("chosen")}}
    paths["study_json"].write_text(json.dumps(data, indent=1, default=_json) + "\n")
    return paths


def _json(x):
    if isinstance(x, np.ndarray):
        return [round(float(v), 6) for v in x]
    return json_default(x)
