"""The RULER report: ``ruler.json`` (every prompt's row and the summary), ``ruler.md`` (scores per length,
task and haystack with intervals, effective lengths, paired comparisons) and ``ruler_vs_length.png`` (score
against length per method, one panel per task; drawn as :mod:`hf_trajpe.evaluation.report` draws its
charts: matplotlib's Agg backend, one colour per method)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .summary import summarize

__all__ = ["markdown", "plot_score_vs_length", "write_ruler_report"]


def _cell(c: dict | None) -> str:
    return "" if c is None else f"{c['score']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]"


def _table(cells: list[dict], keys: tuple[str, ...], lengths: list[int]) -> list[str]:
    index: dict[tuple, dict[int, dict]] = {}
    for c in cells:
        index.setdefault(tuple(c[k] for k in keys), {})[c["length"]] = c
    lines = ["| " + " | ".join(keys) + " | " + " | ".join(f"{L} tok" for L in lengths) + " |",
             "|" + "---|" * len(keys) + "---:|" * len(lengths)]
    for key, per_length in index.items():
        lines.append("| " + " | ".join(str(k) for k in key) + " | "
                     + " | ".join(_cell(per_length.get(L)) for L in lengths) + " |")
    return lines


def markdown(table: dict, summary: dict, chart: str | None = None) -> str:
    meta, lengths = table["meta"], sorted({r["length"] for r in table["rows"]})
    eff = summary["effective_length"]
    n = sorted({c["n"] for c in summary["cells"]})
    cpu = sum(r["cpu_seconds"] for r in table["rows"])
    lines = ["# RULER: synthetic long-context tasks\n",
             f"Methods: {', '.join(meta['methods'])}. Tasks: {', '.join(meta['tasks'])}. Haystacks: "
             f"{', '.join(meta['haystacks'])}. Lengths (prompt tokens): {', '.join(map(str, lengths))}. "
             f"{'/'.join(map(str, n))} prompts per cell, seed {meta.get('seed', 0)}; greedy generation; RULER's "
             f"string_match_all (fraction of the references found). Cells: mean score "
             f"[{summary['level']:.0%} interval: {summary['interval']}]. Generation CPU {cpu:.0f} s"
             + (f"; read in {meta['precision']['dtype']} ({meta['precision']['reason']})" if meta.get("precision")
                else "") + ".\n",
             "\n## Score by length (every task and haystack)\n", *_table(summary["by_length"], ("method",), lengths),
             "\n## Effective length\n",
             f"The longest length up to which every tested length scores at least {eff['ratio']:g} x the score of "
             f"`{eff['baseline']}` at {eff['reference_length']} tokens ({eff['reference_score']:.2f}), i.e. "
             f"{eff['threshold']:.2f} (RULER: a fixed 85.6%).\n",
             "| method | effective length |", "|---|---:|"]
    lines += [f"| {m} | {v['length'] if v['length'] is not None else 'below the shortest'} |"
              for m, v in eff["methods"].items()]
    if summary["comparisons"]:
        lines += ["\n## Paired against the baseline (the same prompts)\n", summary["comparison_test"] + ".\n",
                  "| method | length | mean difference [interval] | wins / losses / ties | p |",
                  "|---|---|---:|---:|---:|"]
        lines += [f"| {c['method']} | {c['length']} | {c['diff']:+.2f} [{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}] | "
                  f"{c['wins']} / {c['losses']} / {c['ties']} | {c['p_value']:.3g} |" for c in summary["comparisons"]]
    lines += ["\n## By task\n", *_table(summary["by_task"], ("method", "task"), lengths),
              "\n## By haystack\n", *_table(summary["by_haystack"], ("method", "haystack"), lengths),
              "\n## Every cell\n", *_table(summary["cells"], ("method", "task", "haystack"), lengths)]
    if chart:
        lines += [f"\n![score against length]({chart})"]
    if meta.get("patches"):
        lines += ["\n## Patches\n"]
        lines += [f"- `{k}`: `{json.dumps(v, sort_keys=True)}`" for k, v in meta["patches"].items()]
    return "\n".join(lines) + "\n"


def plot_score_vs_length(table: dict, summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods, lengths = table["meta"]["methods"], sorted({r["length"] for r in table["rows"]})
    panels = [("every task", summary["by_length"])] + [
        (t, [c for c in summary["by_task"] if c["task"] == t]) for t in table["meta"]["tasks"]]
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for ax, (title, cells) in zip(axes.flat, panels, strict=False):
        for k, method in enumerate(methods):
            pts = sorted((c["length"], c["score"], c["ci"]) for c in cells if c["method"] == method)
            if pts:
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                err = [[y - p[2][0] for y, p in zip(ys, pts, strict=True)],
                       [p[2][1] - y for y, p in zip(ys, pts, strict=True)]]
                ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=method, color=f"C{k}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(L) for L in lengths], fontsize=7)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("prompt length (tokens)", fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("score")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_ruler_report(table, out, summary: dict | None = None, **summary_options) -> dict[str, Path]:
    """Write ``ruler.json``, ``ruler.md`` and ``ruler_vs_length.png`` into ``out``; ``table``: a
    :class:`~.runner.RulerTable` or its dict; ``summary_options``: :func:`~.summary.summarize`'s."""
    data = table.to_dict() if hasattr(table, "to_dict") else table
    summary = summary or summarize(data, **summary_options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "ruler.json", "md": out / "ruler.md", "png": out / "ruler_vs_length.png"}
    plot_score_vs_length(data, summary, paths["png"])
    paths["json"].write_text(json.dumps(data | {"summary": summary}, indent=2, default=str) + "\n")
    paths["md"].write_text(markdown(data, summary, paths["png"].name))
    return paths
