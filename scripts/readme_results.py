"""The README's result tables, generated from the files in docs/results (never typed by hand).

Each table sits between ``<!-- results:NAME:start -->`` and ``<!-- results:NAME:end -->`` in README.md and is
rendered here from one JSON file; the text between the markers is replaced whole. Run it after a study rewrites
its files::

    python scripts/readme_results.py           # rewrite README.md
    python scripts/readme_results.py --check   # exit 1 naming the tables that differ from their files

``tests/test_readme.py`` fails when README.md and the files disagree. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(r"(<!-- results:(?P<name>[a-z_]+):start -->\n)(?P<body>.*?)(<!-- results:(?P=name):end -->)", re.S)


def _load(rel: str) -> dict:
    return json.loads((RESULTS / rel).read_text())


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _source(rel: str, extra: str = "") -> str:
    return f"Source: [docs/results/{rel}](docs/results/{rel}){extra}."


def content_study() -> str:
    """Trajectory against its own base, per comparison group: how many differences each correction calls."""
    data = _load("study/rejudged.json")
    rows = ["| comparison | cells | delta at 128 tokens (range) | called, Holm | called, BH 5% | equivalent ±2% |",
            "|---|---:|---:|---:|---:|---:|"]
    for group in data["groups"]:
        if group["kind"] != "trajectory against its base":
            continue
        cells = [c for per_len in group["deltas"].values() for c in per_len.values()]
        at_train = [c["delta_pct"] for per_len in group["deltas"].values() for n, c in per_len.items() if n == "128"]
        holm = sum(c["significance"] != "no significant difference" for c in cells)
        bh = sum(c.get("significance_bh", "no significant difference") != "no significant difference" for c in cells)
        equivalent = sum(bool(c["equivalent"]) for c in cells)
        rows.append(f"| {group['model']} vs {group['reference']} | {len(cells)} | "
                    f"{min(at_train):+.1f} to {max(at_train):+.1f}% | {holm} | {bh} | {equivalent} |")
    return "\n".join(rows) + "\n\n" + _source(
        "study/rejudged.md", f", 3 seeds, {data['family_size']} comparisons in the family; delta: percent change "
        "of perplexity, positive = trajectory better")


TASK_SPLITS = {"selective_copy": ("test", "test_ood_sparse"), "counting": ("test_ood", "test_ood_value"),
               "flip_flop": ("test", "test_ood_sparse")}
TASK_ENCODINGS = ("learned", "rope", "cope", "trajectory_rope")


def tasks() -> str:
    """Exact match, mean over seeds, per task, split and encoding."""
    data = _load("tasks/tasks.json")
    rows = ["| task (steps) | split | " + " | ".join(TASK_ENCODINGS) + " |",
            "|---|---|" + "---:|" * len(TASK_ENCODINGS)]
    for task, splits in TASK_SPLITS.items():
        entry = data["tasks"][task]
        for split in splits:
            cells = []
            for enc in TASK_ENCODINGS:
                res = entry["results"].get(enc, {}).get(split)
                cells.append(_pct(res["exact_match"]["mean"]) if res else "-")
            rows.append(f"| {task} ({entry['steps']}) | {split} | " + " | ".join(cells) + " |")
    seeds, method = len(data["config"]["seeds"]), data["method"]
    return "\n".join(rows) + "\n\n" + _source(
        "tasks/README.md", f", {seeds} seeds, {method['family_size']} comparisons ({method['correction']} and the "
        "false discovery rate)")


def extension_real() -> str:
    """SmolLM2 read zero-shot at twice its trained length: perplexity by window, passkey found per length."""
    data = _load("extension/study/real/long_context.json")
    first = next(iter(data["models"].values()))
    labels = [w["label"] for w in first["windows"]["all"]]
    lengths = " / ".join(f"{p['length'] // 1024}k" for p in first["passkey"])
    rows = ["| method | " + " | ".join(f"ppl {lab}" for lab in labels) + f" | passkey {lengths} |",
            "|---|" + "---:|" * len(labels) + ":---:|"]
    for name, model in data["models"].items():
        ppl = " | ".join(f"{w['ppl']:.2f}" for w in model["windows"]["all"])
        found = " / ".join(f"{p['right']}/{p['trials']}" for p in model["passkey"])
        rows.append(f"| {name} | {ppl} | {found} |")
    return "\n".join(rows) + "\n\n" + _source(
        "extension/README.md", f"; SmolLM2-135M (trained on {data['trained_length']:,} positions) at "
        f"{data['length']:,} tokens, {len(data['documents'])} documents, x = the trained length")


def _score(cell: dict) -> str:
    return f"{cell['score']:.2f} [{cell['ci'][0]:.2f}, {cell['ci'][1]:.2f}]"


def ruler() -> str:
    """RULER's needle on SmolLM2: score per method and length with its exact interval, and the paired test."""
    data = _load("ruler/smollm2/ruler.json")
    summary, meta = data["summary"], data["meta"]
    lengths = meta["lengths"]
    cells = {(c["method"], c["length"]): c for c in summary["by_length"]}
    tests = {(c["method"], c["length"]): c for c in summary["comparisons"]}
    baseline = summary["effective_length"]["baseline"]
    rows = ["| method | " + " | ".join(f"{n // 1024}k" for n in lengths) + f" | at {lengths[-1] // 1024}k "
            f"against {baseline} (wins / losses, p) |", "|---|" + "---:|" * len(lengths) + "---:|"]
    for method in meta["methods"]:
        test = tests.get((method, lengths[-1]))
        paired = f"{test['wins']} / {test['losses']}, p = {test['p_value']:.2g}" if test else "-"
        rows.append(f"| {method} | " + " | ".join(_score(cells[method, n]) for n in lengths) + f" | {paired} |")
    n = cells[meta["methods"][0], lengths[0]]["n"]
    return "\n".join(rows) + "\n\n" + _source(
        "ruler/smollm2/README.md", f"; {', '.join(meta['tasks'])} on the {', '.join(meta['haystacks'])} haystack, "
        f"{n} prompts per cell (the same prompts for every method), seed {meta['seed']}, "
        f"{meta['precision']['dtype']}; score [exact 95% interval]; p: exact sign test on the same prompts")


def extension_study() -> str:
    """The controlled extension study: zero-shot perplexity, every type pooled, per read length."""
    data = _load("extension/study/study.json")
    table = data["perplexity"]["pretrain"]
    factors = sorted(next(iter(table.values())), key=float)
    rows = ["| method | " + " | ".join(f"{f}x" for f in factors) + " |", "|---|" + "---:|" * len(factors)]
    for name, per_factor in table.items():
        rows.append(f"| {name} | " + " | ".join(f"{per_factor[f]['all types']['ppl']:.2f}" for f in factors) + " |")
    seeds = len(data["config"]["seeds"])
    return "\n".join(rows) + "\n\n" + _source(
        "extension/study/study.md", f"; small RoPE models trained at {data['config']['data']['block_size']} tokens, "
        f"{seeds} seeds, mean perplexity (intervals and verdicts in the file)")


def recovery() -> str:
    """Perplexity of SmolLM2 after a swap, before and after 40 LoRA steps, per layers swapped."""
    data = _load("recovery_layers/recovery.json")
    rows = ["| swap | step 0 | last step | gap to the stock model tuned alike (real_text) |", "|---|---:|---:|---:|"]
    for name, curve in data["curves"].items():
        rec = data.get("recovered", {}).get(name, {}).get("real_text")
        gap = f"{rec['gap']:+.1%} [{rec['gap_ci'][0]:+.1%}, {rec['gap_ci'][1]:+.1%}]" if rec else "-"
        rows.append(f"| {name} | {curve[0]['perplexity']:.2f} | {curve[-1]['perplexity']:.2f} | {gap} |")
    return "\n".join(rows) + "\n\n" + _source(
        "recovery_layers/recovery.md", f"; one seed, stock untuned {data['stock_perplexity']:.2f}, "
        f"{data['curves']['native'][-1]['step']} steps")


def bench() -> str:
    """The benchmark's targets per kind: how many met, missed and unresolved, and the worst ratio measured."""
    data = _load("bench/bench.json")
    meta = data["meta"]
    kinds: dict[str, list[dict]] = {}
    for t in data["targets"]:
        kinds.setdefault(t["what"], []).append(t)
    rows = ["| target (limit) | met | missed | unresolved | largest measured |", "|---|---:|---:|---:|---:|"]
    for what, targets in kinds.items():
        worst = max(targets, key=lambda t: t["measured"])
        if worst["limit"] is None:  # reported, bound by nothing
            counts, limit = ["-"] * 3, ""
        else:
            counts = [sum(t["verdict"] == v for t in targets) for v in ("met", "missed", "unresolved")]
            limit = f" (<= {worst['limit']})"
        rows.append(f"| {what}{limit} | " + " | ".join(map(str, counts))
                    + f" | {worst['measured']:.3f} ({worst['where']}, {worst['variant']}) |")
    units = meta.get("cpu_bfloat16")
    bf16 = "" if units is None else f", {'with' if units['units'] else 'no'} bfloat16 units"
    clock = f", {meta['clock']} clock" if "clock" in meta else ""
    threads = f"{meta['torch_threads']} thread{'s' if meta['torch_threads'] != 1 else ''}"
    return "\n".join(rows) + "\n\n" + _source(
        "bench/bench.md", f", run of {meta['date_utc']} UTC on {meta['cpu']} ({meta['cpu_count']} cores{bf16}, "
        f"{threads}{clock}, {meta['dtype']}, transformers {meta['transformers']}, "
        f"{meta['wall_s']:.0f} s in one sitting); a verdict is read from the ratio's 95% interval")


TABLES: dict[str, Callable[[], str]] = {"content_study": content_study, "tasks": tasks,
                                        "extension_real": extension_real, "ruler": ruler,
                                        "extension_study": extension_study,
                                        "recovery": recovery, "bench": bench}


def render(text: str) -> tuple[str, list[str]]:
    """``text`` with every results block rendered anew, and the names of the blocks that changed."""
    changed: list[str] = []

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"README block results:{name} has no renderer; known: {', '.join(TABLES)}")
        body = TABLES[name]() + "\n"
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    return MARKER.sub(fill, text), changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs from its file")
    p.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = p.parse_args(argv)
    text = args.readme.read_text()
    new, changed = render(text)
    if args.check:
        if changed:
            print(f"{args.readme}: out of date with docs/results: {', '.join(changed)}; run "
                  "python scripts/readme_results.py", file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(new)
    print(f"{args.readme}: {', '.join(changed) or 'nothing'} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
