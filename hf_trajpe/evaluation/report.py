"""Reports of an :class:`~hf_trajpe.evaluation.EvaluationResult`: ``report.json``, ``report.md`` and
two PNG charts (``delta_per_type.png``: delta per content type with 95% error bars and the equivalence
margin shaded; ``ppl_vs_length.png``: perplexity against context length, one panel per type).

Every row against the baseline gets a plain verdict (better / worse / no significant difference at 95%,
with whether it is equivalent within the margin: :mod:`hf_trajpe.evaluation.verdicts`); the seed design's
claims are not compared here (they are about trajectory against its own base: the study's report).
``meta["summary_md"]`` (lines), when present, opens the report (the study's first screen);
``meta["control"]`` (the study's diagnosis of the random-content control) replaces the harness banner by
its plain finding when the models are under-trained; ``meta["positions"]``: displacement statistics.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .claims import HARNESS_PROBLEM
from .metrics import get_metric
from .positions import positions_markdown

__all__ = ["cell", "harness_banner", "legend", "mark", "markdown_report", "p_text", "plot_delta_per_type",
           "plot_ppl_vs_length", "write_report"]


def _fmt(x, metric: str = "perplexity") -> str:
    """A result as its metric shows it (``n/a`` where there is none)."""
    return get_metric(metric).format(x)


def mark(d: dict) -> str:
    """▲ better / ▼ worse (its ``significance``: Holm-adjusted where the report judged its comparisons
    together); = equivalent within the margin; ? neither (nothing ruled out)."""
    sig = {"better": "▲", "worse": "▼"}.get(d.get("significance", ""), "")
    eq = "=" if d.get("equivalent") else ("" if sig else "?")
    return sig + eq


def cell(d: dict | None, digits: int = 1) -> str:
    """``+1.2 [+0.3, +2.1] ▲``: a delta, its 95% interval and its :func:`mark`."""
    if not d:
        return "n/a"
    lo, hi = d["ci"]
    return f"{d['delta_pct']:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}] {mark(d)}".rstrip()


def p_text(p: float | None) -> str:
    """A p-value as a report prints it: ``<1e-4`` below that, ``-`` where there is none."""
    if p is None:
        return "-"
    return "<1e-4" if p < 1e-4 else f"{p:.3g}"


def legend(margin: float, unit: str = "%", family: int | None = None, correction: str = "holm") -> str:
    """The marks in words; ``family``: the number of comparisons the report's verdicts were adjusted across
    (by ``correction``: ``holm`` or ``bh``)."""
    if family is None:
        return (f"▲ significantly better, ▼ significantly worse (95% interval excludes 0); = equivalent within "
                f"±{margin:g}{unit} (two one-sided tests at 5%: the 90% interval lies inside ±{margin:g}{unit}); "
                "? no significant difference and not shown equivalent (the data cannot tell)")
    return (f"▲ significantly better, ▼ significantly worse, = equivalent within ±{margin:g}{unit} (two one-sided "
            f"tests), each at 5% after {'Holm' if correction == 'holm' else 'Benjamini-Hochberg'}'s adjustment "
            f"across the {family} comparison{'s' if family != 1 else ''} "
            "of this report; ? none of these (the data cannot tell). The intervals are per comparison: one can "
            "exclude 0 without ▲/▼")


def harness_banner(problems: list[tuple], control: dict | None) -> list[str]:
    """The loud banner of significant improvements on random content, unless the study's diagnosis of
    the control says what they are (under-trained models); then its plain finding instead."""
    if not problems:
        return []
    if control and control.get("status") == "calibration":
        return []  # the study's summary says what they are, in plain words
    lines = ["> **⚠ HARNESS PROBLEM.** A significant improvement was measured on `random_content`, "
             "where no positional encoding can help (uniform random tokens). Do not trust the other "
             "rows until this is explained: a data leak, different test data per model, a bug in "
             "scoring, or models not trained to convergence on random content (their perplexity there "
             "far above the size of the random alphabet, 95 for the byte tokenizer), in which case the "
             "difference is calibration, not position:", ">"]
    if control and control.get("finding"):
        lines += [f"> {control['finding']}", ">"]
    lines += [f"> - `{m}` at {L} tokens: {d['delta_pct']:+.2f}% [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]"
              for m, t, L, d in problems]
    return lines + [""]


def _summary(meta: dict, deltas: dict, first: str) -> list[str]:
    """The default first screen: every model against the baseline at the first length, one cell per type."""
    if not deltas:
        return []
    names = list(deltas)
    lines = [f"## Summary: against `{meta['baseline']}` at {first} tokens", "",
             "| content type | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---:|" * len(names)]
    for t in meta["content_types"]:
        lines.append(f"| {t} | " + " | ".join(cell(deltas[n].get(t, {}).get(first)) for n in names) + " |")
    return lines + ["", "Cells: delta of perplexity in percent (positive = better than the baseline) "
                    f"[{meta['level']:.0%} interval]. " + legend(meta.get("equivalence_margin", 2.0), "%",
                                                                 meta.get("family_size")), ""]


def markdown_report(data: dict, charts: dict[str, str] | None = None) -> str:
    """The Markdown report from ``EvaluationResult.to_dict()``."""
    meta, results, deltas = data["meta"], data["results"], data["deltas"]
    base, lengths = meta["baseline"], meta["lengths"]
    first = str(lengths[0])
    margin = meta.get("equivalence_margin", 2.0)
    lines = [meta.get("title", "# hf_trajpe evaluation report"), ""]
    problems = [(m, t, L, d) for m, per_t in deltas.items() for t, per_l in per_t.items()
                for L, d in per_l.items() if d.get("control_flag", d["verdict"]) == HARNESS_PROBLEM]
    lines += harness_banner(problems, meta.get("control"))
    lines += list(meta.get("summary_md") or _summary(meta, deltas, first))
    scoring = ("next-token (causal LM)" if meta["mode"] == "clm"
               else "masked-token (15% of positions, masked LM)")
    contexts = ", ".join(f"{m}x = {L}" for m, L in zip(meta["length_multipliers"], lengths, strict=True))
    lines += ["## How it was measured", "",
              f"- created: {meta['created']} (hf_trajpe {meta['hf_trajpe_version']})",
              f"- baseline: `{base}`; scoring: {scoring}",
              f"- tokenizer: {meta['tokenizer']}; training block size {meta['block_size']}; "
              f"context lengths {contexts}",
              f"- test data: {meta['data']}; tokens scored per type and length: "
              + ", ".join(f"{t} {n}" for t, n in meta["tokens_per_type"].items()),
              f"- intervals: {meta['level']:.0%}, Student's t over seeds (per-seed deltas, paired seed by seed) "
              f"plus the spread over test sequences (the standard deviation of {meta['n_resamples']} paired "
              "bootstrap resamples of the sequences); with one seed, the normal interval of that bootstrap",
              f"- verdicts: {_family_words(meta)}",
              f"- equivalence: within ±{margin:g}% of relative perplexity, by two one-sided tests at "
              f"{1 - meta['level']:.0%}" + (" (Holm-adjusted like the significance)" if meta.get("family_size")
                                            is not None else
                                            f" (the {2 * meta['level'] - 1:.0%} interval inside ±{margin:g}%)"),
              f"- delta: {meta['delta_definition']}", "", "## Models", "",
              "| name | seeds | class | parameters | source | patch |", "|---|---:|---|---:|---|---|"]
    for name, seeds in data["models"].items():
        s0 = seeds[0]
        sources = sorted({s["source"] for s in seeds})
        lines.append(f"| `{name}`{' (baseline)' if name == base else ''} | {len(seeds)} | {s0['class']} | "
                     f"{s0['parameters']:,} | {', '.join(sources)} | {s0.get('hf_trajpe_patch', 'none')} |")
    lines.append("")
    for name, per_t in deltas.items():
        lines += [f"## `{name}` against `{base}` at {first} tokens", "",
                  f"| content type | delta [{meta['level']:.0%} CI] | {2 * meta['level'] - 1:.0%} CI (equivalence) | "
                  "p | p (Holm) | verdict | ppl baseline | ppl encoding | acc baseline | acc encoding |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
        for t in meta["content_types"]:
            d = per_t.get(t, {}).get(first)
            rb, re_ = results[base][t][first], results[name][t][first]
            if d is None:
                reason = re_.get("skipped") or rb.get("skipped") or "not computed"
                lines.append(f"| {t} | n/a | n/a | | | skipped: {reason} | | | | |")
                continue
            mark_ = "**" if d["verdict"] == HARNESS_PROBLEM else ""
            seeds_note = f" (seeds: [{d['ci_seeds'][0]:+.2f}, {d['ci_seeds'][1]:+.2f}])" if d.get("ci_seeds") else ""
            eq = d.get("ci_equivalence")
            lines.append(f"| {t} | {d['delta_pct']:+.2f}% [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]{seeds_note} | "
                         + (f"[{eq[0]:+.2f}, {eq[1]:+.2f}]" if eq else "n/a")
                         + f" | {p_text(d.get('p_value'))} | {p_text(d.get('p_holm'))}"
                         + f" | {mark_}{d['verdict']}{mark_} | {_fmt(rb['perplexity'])} | {_fmt(re_['perplexity'])} | "
                         f"{_fmt(rb['accuracy'], 'token_accuracy')} | {_fmt(re_['accuracy'], 'token_accuracy')} |")
        lines.append("")
    if len(lengths) > 1:
        lines += ["## Perplexity against context length", "",
                  "Same test tokens at every length, cut into blocks of that length. A model trained on "
                  f"{meta['block_size']}-token blocks meets unseen positions beyond 1x.", "",
                  "| content type | model | " + " | ".join(f"{L} tokens" for L in lengths) + " |",
                  "|---|---|" + "---:|" * len(lengths)]
        for t in meta["content_types"]:
            for name in results:
                cells = []
                for L in lengths:
                    r = results[name][t][str(L)]
                    cells.append("skipped" if "skipped" in r else _fmt(r["perplexity"]))
                lines.append(f"| {t} | `{name}` | " + " | ".join(cells) + " |")
        lines.append("")
        if deltas:
            lines += ["Deltas at every length:", "", "| content type | model | "
                      + " | ".join(f"{L} tokens" for L in lengths) + " |", "|---|---|" + "---:|" * len(lengths)]
            for name, per_t in deltas.items():
                for t in meta["content_types"]:
                    lines.append(f"| {t} | `{name}` | "
                                 + " | ".join(cell(per_t.get(t, {}).get(str(L))) for L in lengths) + " |")
            lines.append("")
    if meta.get("positions"):
        lines += ["## Where the trajectory models put their tokens", "",
                  f"On the test data at {first} tokens: the step `p_i - p_(i-1)` (1 for integer positions) and its "
                  "coefficient of variation, the displacement `p_i - i`, the share of positions clamped at the "
                  "position limit.", ""]
        lines += positions_markdown(meta["positions"])
    if charts:
        lines += ["## Charts", ""] + [f"![{title}]({path})" for title, path in charts.items()] + [""]
    lines += ["## How to read the verdicts", "",
              f"*better* / *worse* / *no significant difference*: {_family_words(meta)}. Each says whether an "
              f"effect larger than ±{margin:g}% is ruled out: *equivalent within ±{margin:g}%* (two one-sided "
              f"tests at {1 - meta['level']:.0%}), else *not shown equivalent*: *no significant difference* alone "
              "is not *no effect*. On `random_content` an improvement whose own interval excludes 0 is flagged, "
              "without adjustment: no encoding can help there. The seed design's claimed ranges are about "
              "trajectory against its own base encoding, so they are not compared here.", ""]
    return "\n".join(lines)


def _family_words(meta: dict) -> str:
    n = meta.get("family_size")
    if n is None:
        return f"from the {meta['level']:.0%} interval of each comparison alone (lo > 0: better; hi < 0: worse)"
    return (f"p-values of Student's t, adjusted by Holm's method across the {n} comparison{'s' if n != 1 else ''} "
            "of this report; "
            f"better/worse when the adjusted p < {1 - meta['level']:.2g} (the intervals shown are per comparison, "
            "so one can exclude 0 without a verdict)")


def plot_delta_per_type(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, deltas = data["meta"], data["deltas"]
    types, first = meta["content_types"], str(meta["lengths"][0])
    fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(types)), 4.5))
    margin = meta.get("equivalence_margin", 2.0)
    ax.axhspan(-margin, margin, color="0.9", label=f"equivalence margin ±{margin:g}%")
    width = 0.8 / max(1, len(deltas))
    for k, (name, per_t) in enumerate(deltas.items()):
        xs, ys, lo, hi = [], [], [], []
        for i, t in enumerate(types):
            d = per_t.get(t, {}).get(first)
            if d:
                xs.append(i - 0.4 + width * (k + 0.5))
                ys.append(d["delta_pct"])
                lo.append(d["delta_pct"] - d["ci"][0])
                hi.append(d["ci"][1] - d["delta_pct"])
        color = f"C{list(data['results']).index(name)}"  # the same colour as in ppl_vs_length.png
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=4, label=name, color=color)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(types)), [t.replace("_", "\n") for t in types], fontsize=8)
    ax.set_ylabel("perplexity delta vs baseline (%)")
    ax.set_title(f"Delta against `{meta['baseline']}` at {first} tokens (95% bootstrap CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_ppl_vs_length(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, results = data["meta"], data["results"]
    types, lengths = meta["content_types"], meta["lengths"]
    cols = min(4, len(types))
    rows = math.ceil(len(types) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for ax, t in zip(axes.flat, types, strict=False):
        for name, per_t in results.items():
            pts = [(L, per_t[t][str(L)]["perplexity"]) for L in lengths if "perplexity" in per_t[t][str(L)]]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name, color=f"C{list(results).index(name)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, [str(L) for L in lengths])
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("context length (tokens)", fontsize=8)
    for ax in list(axes.flat)[len(types):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("perplexity")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_report(result, out_dir) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and the PNG charts into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = result.to_dict() if hasattr(result, "to_dict") else result
    paths = {"json": out / "report.json", "markdown": out / "report.md"}
    charts = {}
    if data["deltas"]:
        paths["delta_png"] = out / "delta_per_type.png"
        plot_delta_per_type(data, paths["delta_png"])
        charts["delta per content type"] = paths["delta_png"].name
    if len(data["meta"]["lengths"]) > 1:
        paths["length_png"] = out / "ppl_vs_length.png"
        plot_ppl_vs_length(data, paths["length_png"])
        charts["perplexity against context length"] = paths["length_png"].name
    paths["json"].write_text(json.dumps(data, indent=2) + "\n")
    paths["markdown"].write_text(markdown_report(data, charts))
    return paths
