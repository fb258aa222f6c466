"""The README's result tables, generated from the files in docs/results (never typed by hand).

Each table sits between ``<!-- results:NAME:start -->`` and ``<!-- results:NAME:end -->`` in README.md (or in
the READMEs of docs/results, :data:`FILES`) and is rendered here from one JSON file; the text between the markers
is replaced whole. Run it after a study rewrites its files::

    python scripts/readme_results.py           # rewrite README.md and the results' READMEs
    python scripts/readme_results.py --check   # exit 1 naming the tables that differ from their files

``tests/test_readme.py`` fails when README.md and the files disagree. Standard library only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

from hf_trajpe.evaluation.long_context import span_perplexity
from hf_trajpe.evaluation.ruler.stats import fisher_exact
from hf_trajpe.evaluation.seed_inference import t_ppf

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(r"(<!-- results:(?P<name>[a-z0-9_]+):start -->\n)(?P<body>.*?)"
                    r"(<!-- results:(?P=name):end -->)", re.S)


def _load(rel: str) -> dict:
    return json.loads((RESULTS / rel).read_text())


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _source(rel: str, extra: str = "") -> str:
    return f"Source: [docs/results/{rel}](docs/results/{rel}){extra}."


def content_study() -> str:
    """Trajectory against its own base, per comparison group: how many differences each correction calls."""
    data = _load("study/rejudged.json")
    rows = ["| comparison | cells | delta at 128 tokens (range) | called, Holm | called, BH 5% | equivalent ±2% "
            "| claim ruled out, 128 tokens |", "|---|---:|---:|---:|---:|---:|---:|"]
    for group in data["groups"]:
        if group["kind"] != "trajectory against its base":
            continue
        cells = [c for per_len in group["deltas"].values() for c in per_len.values()]
        at_train = [c["delta_pct"] for per_len in group["deltas"].values() for n, c in per_len.items() if n == "128"]
        holm = sum(c["significance"] != "no significant difference" for c in cells)
        bh = sum(c.get("significance_bh", "no significant difference") != "no significant difference" for c in cells)
        equivalent = sum(bool(c["equivalent"]) for c in cells)
        claims = [c for per_len in group["deltas"].values() for n, c in per_len.items()
                  if n == "128" and "claim_ruled_out" in c]
        ruled = f"{sum(c['claim_ruled_out'] for c in claims)} of {len(claims)} types"
        rows.append(f"| {group['model']} vs {group['reference']} | {len(cells)} | "
                    f"{min(at_train):+.1f} to {max(at_train):+.1f}% | {holm} | {bh} | {equivalent} | {ruled} |")
    return "\n".join(rows) + "\n\n" + _source(
        "study/rejudged.md", f", {len(data['seeds'])} seeds, {data['family_size']} comparisons in the family; delta: "
        "percent change of perplexity, positive = trajectory better; claim ruled out: the 95% interval's upper end "
        "below the claimed minimum")


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
    calls = _task_calls(data)
    return "\n".join(rows) + "\n\n" + _source(
        "tasks/README.md", f", {seeds} seeds, {method['family_size']} comparisons; differences called: {calls['holm']} "
        f"under Holm (declared), {calls['bh']} under Benjamini-Hochberg (seeds that all agree: the exact sign-flip "
        "bound, never certainty)")


def _task_differences(data: dict):
    """Every difference of a task study's JSON, once per comparison."""
    seen = set()
    for task, entry in data["tasks"].items():
        for name, per_split in entry["results"].items():
            for split, cell in per_split.items():
                for to_base, to_ref in (("vs_baseline", "vs"), ("token_vs_baseline", "token_vs")):
                    found = [(data["baseline"], cell[to_base])] if to_base in cell else []
                    for ref, d in found + list(cell.get(to_ref, {}).items()):
                        if (task, name, split, to_base, ref) not in seen:
                            seen.add((task, name, split, to_base, ref))
                            yield d


def _task_calls(data: dict) -> dict[str, int]:
    called = {"holm": 0, "bh": 0}
    for d in _task_differences(data):
        called["holm"] += d.get("significance_holm", "no significant difference") != "no significant difference"
        called["bh"] += d.get("significance_bh", "no significant difference") != "no significant difference"
    return called


#: the reads of the SmolLM2 remap comparison (docs/results/extension/remap_smollm2/), per read length; a method read
#: in two files keeps the first file's row (the units' files read Self-Extend again beside them, at the same settings)
REMAP_READS = {16384: ("test_16k", "pose_16k", "nopose_16k", "units_16k"),
               32768: ("test_32k", "pose_32k", "nopose_32k", "units_32k")}
REMAP_LABELS = {"yarn_x2": "YaRN x2", "dynamic_ntk_x2": "dynamic NTK x2", "yarn_x4": "YaRN x4",
                "dynamic_ntk_x4": "dynamic NTK x4", "self_extend": "Self-Extend", "rerope": "ReRoPE", "dca": "DCA",
                "string": "STRING", "self_extend_units": "Self-Extend over units (lines, sentences)",
                "self_extend_lines": "Self-Extend over lines", "pose": "YaRN x4 + PoSE fine-tune",
                "nopose": "YaRN x4 + the same fine-tune without PoSE"}
#: the order of the rows (names not listed follow, in the order of the files)
REMAP_ORDER = ("stock", "yarn_x2", "dynamic_ntk_x2", "yarn_x4", "dynamic_ntk_x4", "self_extend", "self_extend_units",
               "self_extend_lines", "rerope", "dca", "string", "pose", "nopose")


def extension_remap() -> str:
    """SmolLM2 at 16k and 32k: stock, frequency scaling, the four remaps (settings chosen on validation) and the
    PoSE fine-tune, perplexity per span of positions and the CPU of each read."""
    base = "extension/remap_smollm2"
    spans = [(16384, 0.0, 1.0, "0-8k"), (16384, 1.0, 2.0, "8k-16k"), (32768, 2.0, 4.0, "16k-32k")]
    rows: dict[str, dict] = {}
    docs = {}
    dynamic: dict[str, float] = {}  # dynamic NTK's factor in effect over a read done in one forward
    for length, folders in REMAP_READS.items():
        for folder in folders:
            path = RESULTS / base / folder / "long_context.json"
            if not path.exists():
                continue
            data = json.loads(path.read_text())
            docs[length] = data["documents"]
            for name, model in data["models"].items():
                rows.setdefault(name, {}).setdefault(length, model)
                rope = (data["patches"].get(name) or {}).get("rope_parameters") or {}
                if rope.get("rope_type") == "dynamic" and data.get("prefill_chunk") is None:
                    # transformers rescales for the length of the forward: one forward of the whole document
                    f = rope["factor"]
                    dynamic[name] = f * data["length"] / data["trained_length"] - (f - 1)
    rows = {n: rows[n] for n in sorted(rows, key=lambda n: REMAP_ORDER.index(n) if n in REMAP_ORDER else 99)}
    cells: dict[str, list[float | None]] = {}
    for name, row in rows.items():
        cells[name] = [round(span_perplexity(row[length]["windows"]["all"], lo, hi), 2) if length in row else None
                       for length, lo, hi, _ in spans]  # (rounded as shown: equal cells are bold alike)
    best = [min((c[i] for c in cells.values() if c[i] is not None), default=None) for i in range(len(spans))]
    out = ["| method | " + " | ".join(f"ppl {label}" for *_, label in spans) + " | CPU s per read, 16k / 32k |",
           "|---|" + "---:|" * len(spans) + "---:|"]
    for name, row in rows.items():
        shown = []
        for i, value in enumerate(cells[name]):
            text = "-" if value is None else f"{value:.2f}"
            shown.append(f"**{text}**" if value is not None and value == best[i] else text)
        cpu = " / ".join(f"{row[length]['cpu_seconds'] / sum(map(len, docs[length].values())):.0f}"
                         if length in row else "-" for length in REMAP_READS)
        shown.append(cpu)
        out.append(f"| {REMAP_LABELS.get(name, name)} | " + " | ".join(shown) + " |")
    n16, n32 = (sum(map(len, docs.get(length, {}).values())) for length in REMAP_READS)
    return "\n".join(out) + "\n\n" + _source(
        f"{base}/README.md", f"; 0-8k and 8k-16k from reads of {n16} test documents at 16,384 tokens, 16k-32k from "
        f"{n32} at 32,768 (SmolLM2 is trained on 8,192); bfloat16, one thread; one read per document, no interval; "
        "bold: the lowest. The remaps' settings were chosen on a validation document, frequency scaling ran untuned "
        "at the factor the length asks for" + (
            f"; read in one forward, {' and '.join(REMAP_LABELS.get(n, n) for n in dynamic)} "
            f"{'are NTK at factors' if len(dynamic) > 1 else 'is NTK at a factor of'} "
            f"{' and '.join(f'{f:g}' for f in dynamic.values())} in transformers' formula" if dynamic else "")
        + ". STRING's 32k setting leaves distances past 8k untrained "
        "(no constant shift reaches 4x: see the file); both fine-tunes (300 steps, one seed, the same data) saw "
        "other files of the same kinds: their gain inside 8k is partly adaptation to the text")


def _score(cell: dict) -> str:
    return f"{cell['score']:.2f} [{cell['ci'][0]:.2f}, {cell['ci'][1]:.2f}]"


#: the RULER order table of SmolLM2 on a GPU (make ruler-order-gpu); the README shows it once it exists
RULER_ORDER = "ruler/smollm2_order/table_gpu"


def ruler_order(result: dict, rel: str) -> str:
    """The order table: pooled score per method and length [exact interval], retention at the longest length, and
    the verdict of the declared comparison with the baseline at the main length."""
    plan = result["plan"]
    pooled = {(c["method"], c["length"]): c for c in result["pooled"]}
    retention = {(r["method"], r["length"]): r["retention"] for r in result["retention"]}
    verdicts = {c["a"]: c for c in result["primary"]}
    lengths = sorted({c["length"] for c in result["pooled"]})
    main = plan["main_length"]
    rows = ["| method | " + " | ".join(f"{n // 1024}k" for n in lengths) + f" | retention at {lengths[-1] // 1024}k"
            f" | at {main // 1024}k against {plan['baseline']} (p Holm) |", "|---|" + "---:|" * (len(lengths) + 1)
            + "---|"]
    for m in (plan["baseline"], *plan["extensions"]):
        if not any((m, n) in pooled for n in lengths):
            continue
        cells = [f"{c['mean']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]" if (c := pooled.get((m, n))) else "-"
                 for n in lengths]
        kept = retention.get((m, lengths[-1]))
        v = verdicts.get(m)
        rows.append(f"| {m} | " + " | ".join(cells) + f" | {'-' if kept is None else f'{kept:.2f}'} | "
                    + (f"{v['verdict']} ({v['p_holm']:.2g})" if v else "-") + " |")
    content = next((c for c in result["primary"] if c["a"] == "real text"), None)
    ns = [c["n"] for c in result["cells"]]
    extra = (f"; the needle found under the extensions at {main // 1024}k, real text against generated: "
             f"{content['mean_a']:.2f} of {content['n_a']} prompts against {content['mean_b']:.2f} of "
             f"{content['n_b']}, {content['verdict']}" if content else "")
    return "\n".join(rows) + "\n\n" + _source(
        f"{rel}/order.md", f"; pooled over tasks and haystacks, {min(ns)}-{max(ns)} prompts per cell; score [exact "
        f"95% interval]; the comparisons declared before the data, Holm-corrected{extra}")


def ruler() -> str:
    """RULER's needle on SmolLM2: the order table once the GPU run made it; until then, score per method and length
    with its exact interval, and the paired test."""
    if (RESULTS / RULER_ORDER / "order.json").is_file():
        return ruler_order(_load(f"{RULER_ORDER}/order.json"), RULER_ORDER)
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
    # an extension that finds nothing at the last length is not among those the prompts cannot order
    lost = [m for m in meta["methods"] if m != baseline and cells[m, lengths[-1]]["score"] == 0]
    held = "the extensions" if not lost else "the other extensions"
    lost_text = (f"; {', '.join(lost)} found none at {lengths[-1] // 1024}k (see the file)" if lost else "")
    return "\n".join(rows) + "\n\n" + _source(
        "ruler/smollm2/README.md", f"; {', '.join(meta['tasks'])} on the {', '.join(meta['haystacks'])} haystack, "
        f"{n} prompts per cell (the same prompts for every method), seed {meta['seed']}, "
        f"{meta['precision']['dtype']}; score [exact 95% interval]; p: exact sign test on the same prompts"
        f"{lost_text}; {n} prompts per cell cannot order {held} against each other")


#: the groups of the per-haystack table: RULER's own, the generated content types, the machine's real text
HAYSTACK_GROUPS = {"RULER's noise": ("noise",),
                   "the seven generated types": ("linear_progression", "convergent_flow", "circular_patterns",
                                                 "divergent_expansion", "dialogue_structure", "code_hierarchy",
                                                 "random_content"),
                   "real text (code, prose, manual pages)": ("real_code", "real_prose", "real_man")}


def ruler_haystacks() -> str:
    """RULER's needle on SmolLM2 per kind of haystack, pooled by group, with each group's range of haystacks."""
    data = _load("ruler/smollm2_haystacks/ruler.json")
    meta, rows = data["meta"], data["rows"]
    per = {}
    for r in rows:
        per.setdefault(r["haystack"], []).append(r["score"])
    ungrouped = set(per) - {n for names in HAYSTACK_GROUPS.values() for n in names}
    if ungrouped:
        raise ValueError(f"haystacks {sorted(ungrouped)} belong to no group of HAYSTACK_GROUPS: add them there")
    table = ["| haystack | found | per haystack |", "|---|---:|---:|"]
    for label, names in HAYSTACK_GROUPS.items():
        scores = [x for n in names for x in per[n]]
        means = [sum(per[n]) / len(per[n]) for n in names]
        spread = f"{min(means):.1f}-{max(means):.1f}" if len(names) > 1 else f"{means[0]:.1f}"
        table.append(f"| {label} | {sum(scores):.0f}/{len(scores)} | {spread} |")
    n = len(per["noise"])
    generated, real = (sum(x for name in names for x in per[name]) for names in list(HAYSTACK_GROUPS.values())[1:])
    sizes = [sum(len(per[name]) for name in names) for names in list(HAYSTACK_GROUPS.values())[1:]]
    p = fisher_exact(round(real), sizes[1], round(generated), sizes[0])
    gen_names, real_names = list(HAYSTACK_GROUPS.values())[1:]
    mean = {name: sum(per[name]) / len(per[name]) for name in per}
    p_kinds = rank_test_low([mean[x] for x in real_names], [mean[x] for x in gen_names])
    return "\n".join(table) + "\n\n" + _source(
        "ruler/smollm2_haystacks/README.md", f" (every haystack, intervals); {', '.join(meta['methods'])} "
        f"model, {', '.join(meta['tasks'])} at {meta['lengths'][0]:,} tokens, {n} prompts per haystack, seed "
        f"{meta['seed']}, {meta['precision']['dtype']}. Real text against the generated types: Fisher's exact p = "
        f"{p:.1g} counting prompts, p = {p_kinds:.2g} counting kinds of text ({len(real_names)} against "
        f"{len(gen_names)}, exact rank test); a grouping tested after seeing the table (a finding to confirm)")


def rank_test_low(low: list[float], other: list[float]) -> float:
    """Exact two-sided rank test (twice the one-sided tail, at most 1) that the values of ``low`` rank below those of
    ``other``: the share of the ways to pick ``len(low)`` of all the values whose rank sum is at most the observed
    one. Counts kinds of haystack, not prompts: the prompts of one kind share their text, so they are not
    independent draws of it."""
    values = low + other
    order = sorted(values)
    rank = {v: (order.index(v) + 1 + len(order) - order[::-1].index(v)) / 2 for v in values}  # mid-ranks for ties
    seen = sum(rank[v] for v in low)
    picks = [sum(rank[values[i]] for i in idx) for idx in itertools.combinations(range(len(values)), len(low))]
    return min(1.0, 2 * sum(s <= seen + 1e-9 for s in picks) / len(picks))


def extension_study() -> str:
    """The controlled extension study: zero-shot perplexity, every type pooled, per read length."""
    data = _load("extension/study/study.json")
    table = data["perplexity"]["pretrain"]
    factors = sorted(next(iter(table.values())), key=float)
    rows = ["| method | " + " | ".join(f"{f}x" for f in factors) + " |", "|---|" + "---:|" * len(factors)]
    for name, per_factor in table.items():
        rows.append(f"| {name} | " + " | ".join(f"{per_factor[f]['all types']['ppl']:.2f}" for f in factors) + " |")
    seeds = len(data["config"]["seeds"])
    strengths = sorted({str(m.get("strength")) for m in data["config"]["methods"].values()
                        if isinstance(m, dict) and m.get("encoding") == "trajectory"})
    tuned = _load("extension/study_content/study.json")
    by = {(c["model"], c["reference"], c["factor"]): c["value"] for c in tuned["comparisons"]["pretrain"]}

    def against(model: str, ref: str) -> str:
        return "/".join(f"{by[model, ref, f]:+.1f}%" for f in factors)

    grid = tuned["config"]["methods"]["content_tuned"]["strength"]["choose"]
    learned = [r["learned_strength"] for r in tuned["summaries"] if "learned_strength" in r]
    return "\n".join(rows) + "\n\n" + _source(
        "extension/study/study.md", f"; small RoPE models trained at {data['config']['data']['block_size']} tokens, "
        f"{seeds} seeds, mean perplexity (intervals and verdicts in the file); the content rows at strength "
        f"{', '.join(strengths)}. With the strength chosen on validation from {', '.join(f'{v:g}' for v in grid)} "
        "([docs/results/extension/study_content](docs/results/extension/study_content/study.md)), zero-shot at "
        f"{'/'.join(factors)}x: content-aware against PI {against('content_tuned', 'pi')}, over YaRN against YaRN "
        f"{against('content_yarn_tuned', 'yarn')}; the learned strength ends at {min(learned):.3f}-{max(learned):.3f} "
        "(from 0.5)")


#: the layer selections of the recovery table left to its file (the README keeps k = 2, 4 and all layers)
RECOVERY_LAYERS_SHOWN_NOT = ("8", "15")


def recovery() -> str:
    """Perplexity of SmolLM2 after a swap, before and after 40 LoRA steps, per layers swapped; the gap to the stock
    model tuned alike from the one-seed curve and, for k = 2 and 4, over three seeds."""
    data = _load("recovery_layers/recovery.json")
    seeded = _load("recovery_seeds/recovery.json")
    rows = ["| swap | step 0 | last step | gap to the stock model tuned alike (real_text), one seed | the gap over "
            f"{len(seeded['seeds'])} seeds |", "|---|---:|---:|---:|---:|"]

    def gap(rec: dict | None) -> str:
        return f"{rec['gap']:+.1%} [{rec['gap_ci'][0]:+.1%}, {rec['gap_ci'][1]:+.1%}]" if rec else "-"

    for name, curve in data["curves"].items():
        if name.rsplit("_top", 1)[-1] in RECOVERY_LAYERS_SHOWN_NOT:  # (the middle selections: in the file)
            continue
        one = data.get("recovered", {}).get(name, {}).get("real_text")
        over = seeded.get("recovered", {}).get(name, {}).get("real_text")
        rows.append(f"| {name} | {curve[0]['perplexity']:.2f} | {curve[-1]['perplexity']:.2f} | {gap(one)} | "
                    f"{gap(over)} |")
    per_seed = {int(s): c[-1]["perplexity"] for s, c in seeded["curves_per_seed"]["native"].items()}
    native = list(per_seed.values())
    low, high = prediction_interval(native)
    first = _load("recovery/recovery.json")
    other, other_seed = first["curves"]["native"][-1]["perplexity"], first["config"]["seed"]
    here = data["curves"]["native"][-1]["perplexity"]
    # a range of three seeds says little about a fourth run: the prediction interval does; what the first run's
    # number does show is a change other than the seed when the same seed now ends elsewhere
    inside = "inside" if low <= other <= high else "outside"
    same_seed = (f"; it used seed {other_seed}, which now ends at {per_seed[other_seed]:.2f}, so something other than "
                 "the seed changed: that run's training files held 12 symbolic-link duplicates, since skipped"
                 if other_seed in per_seed else "")
    return "\n".join(rows) + "\n\n" + _source(
        "recovery_layers/recovery.md", f" (also k = 8 and 15; one seed, stock untuned {data['stock_perplexity']:.2f}, "
        f"{data['curves']['native'][-1]['step']} steps) and [docs/results/recovery_seeds/recovery.md]"
        f"(docs/results/recovery_seeds/recovery.md) (seeds {', '.join(map(str, seeded['seeds']))} on identical "
        "training files, the gap paired with the native run of the same seed, t over seeds plus chunks). The stock "
        f"model tuned alike ends at {min(native):.2f}-{max(native):.2f} over those seeds (seed 0 is the one-seed run, "
        f"{here:.2f}); the first run's {other:.2f} (docs/results/recovery) is {inside} the 95% prediction interval "
        f"those seeds give one more run ({low:.2f}-{high:.2f}){same_seed}")


def prediction_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Where one more run would fall, from ``values`` (Student's t on ``n - 1`` degrees of freedom): the range of
    the runs seen is narrower and is not a test of whether another run's value is noise."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_ppf(0.5 + level / 2, n - 1) * sd * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


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
        f"{meta['wall_s']:.0f} s in one sitting); a verdict is read from the ratio's 95% interval; why rows miss: "
        "docs/benchmarks.md. On one NVIDIA H200 (bf16), where these small models are bound by kernel launches: "
        "[docs/results/bench/gpu](docs/results/bench/gpu/README.md)")


def extend_quick() -> str:
    """``make run``'s record in a few lines: each candidate's validation perplexity past the trained length, which
    were eligible, the choice, the needle prompts (docs/results/extend/quick/extension.json)."""
    import textwrap

    rel = "extend/quick"
    d = _load(f"{rel}/extension.json")
    chosen = d["chosen"]["name"]
    parts = []
    for cand in d["candidates"]:
        v = cand.get("validation")
        if v is None:
            continue
        text = f"{cand['name']} {v['ppl_past']:.3f}"
        if not v["eligible"]:
            text += f" (not eligible: {v['inside_vs_stock_percent']:+.1f}% inside)"
        parts.append(f"**{text} (chosen)**" if cand["name"] == chosen else text)
    needles = d["needles"]["methods"]
    found = ", ".join(f"{m} {int(r['found'] * r['prompts'])}/{r['prompts']}" for m, r in needles.items())
    body = (f"SmolLM2-135M, its trained length taken as {d['trained_length']:,} (its config says "
            f"{d['config_trained_length']:,}), read to {d['target_length']:,}; validation perplexity past "
            f"{d['trained_length']:,} (one document): {', '.join(parts)}; needle prompts {found}; "
            f"{d['costs']['reads_cpu_seconds']:.0f} CPU s of reads, {d['precision']['dtype']}, {d['machine']['cpu']}. "
            + _source(f"{rel}/README.md", " (the test reads per kind of text)"))
    return "\n".join(textwrap.wrap(body, 118, break_long_words=False, break_on_hyphens=False))

TABLES: dict[str, Callable[[], str]] = {"content_study": content_study, "tasks": tasks,
                                        "extension_remap": extension_remap, "ruler": ruler,
                                        "extension_study": extension_study,
                                        "recovery": recovery, "bench": bench, "extend_quick": extend_quick}


def render(text: str, tables: dict[str, Callable[[], str]] | None = None) -> tuple[str, list[str]]:
    """``text`` with every results block rendered anew (``tables``: the renderers of its file, README.md's by
    default), and the names of the blocks that changed."""
    tables = TABLES if tables is None else tables
    changed: list[str] = []

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in tables:
            raise KeyError(f"block results:{name} has no renderer; known: {', '.join(tables)}")
        body = tables[name]() + "\n"
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    return MARKER.sub(fill, text), changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs from its file")
    p.add_argument("--readme", type=Path, default=None,
                   help="one file to render (default: README.md and the READMEs of docs/results with blocks)")
    args = p.parse_args(argv)
    targets = [(ROOT / rel, tables) for rel, tables in FILES.items()] if args.readme is None else [
        (args.readme, FILES.get(_relative(args.readme), TABLES))]
    stale = 0
    for path, tables in targets:
        text = path.read_text()
        new, changed = render(text, tables)
        if args.check:
            if changed:
                stale += 1
                print(f"{path}: out of date with docs/results: {', '.join(changed)}; run "
                      "python scripts/readme_results.py", file=sys.stderr)
            continue
        path.write_text(new)
        print(f"{path}: {', '.join(changed) or 'nothing'} rewritten")
    return 1 if stale else 0


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)



def _mark_task(d: dict) -> str:
    """The task report's marks: ▲/▼ under the declared correction, △/▽ only under the other, = equivalent."""
    if d.get("degenerate"):
        return ""
    declared = d.get("correction", "holm")
    other = "significance_bh" if declared == "holm" else "significance_holm"
    sig = {"better": "▲", "worse": "▼"}.get(d.get("significance", ""), "")
    sig = sig or {"better": "△", "worse": "▽"}.get(d.get(other, ""), "")
    return sig + ("=" if d.get("equivalent") else "")


def _seeds_pct(summary: dict) -> str:
    return " / ".join(f"{100 * x:.1f}".replace(".0", "") if x in (0.0, 1.0) else f"{100 * x:.1f}"
                      for x in summary["per_seed"])


def _diff_points(d: dict | None) -> str:
    if d is None:
        return "-"
    if d.get("degenerate"):
        return d["degenerate"]
    lo, hi = d["ci"]
    return f"{100 * d['difference']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] {_mark_task(d)}".rstrip()


#: the rows of the task study's known-result tables: (task, split, label)
KNOWN_SPLITS = [("selective_copy", "test", "in distribution (16 blanks)"),
                ("selective_copy", "test_ood_sparse", "OOD, 32 blanks"),
                ("selective_copy", "test_ood_dense", "OOD, 8 blanks"),
                ("counting", "test", "3-16 statements"),
                ("counting", "test_ood", "OOD, 17-32 statements, the same answers"),
                ("counting", "test_ood_value", "OOD, answers of 7 or more"),
                ("flip_flop", "test", "FFL(0.8), in distribution"),
                ("flip_flop", "test_ood_sparse", "OOD FFL(0.98), sparse"),
                ("flip_flop", "test_ood_dense", "OOD FFL(0.1), dense")]


def _known(metric: str, to_ref: str) -> str:
    data = _load("tasks/tasks.json")
    rows = []
    for task, split, label in KNOWN_SPLITS:
        entry = data["tasks"][task]
        res = entry["results"]
        if metric not in res.get("cope", {}).get(split, {}):
            continue
        cells = [f"{100 * res[e][split][metric]['mean']:.1f} ({_seeds_pct(res[e][split][metric])})"
                 for e in ("learned", "rope", "cope")]
        diff = _diff_points(res["cope"][split].get(to_ref, {}).get("rope"))
        rows.append(f"| {task.replace('_', ' ')} ({entry['steps']:,}) | {label} | " + " | ".join(cells)
                    + f" | {diff} |")
    return "\n".join(rows)


def tasks_known() -> str:
    """The task study's known-result table: exact match per seed, CoPE minus RoPE with its verdict mark."""
    head = ("| task (steps) | split | learned (absolute) | RoPE | CoPE | CoPE − RoPE (points, 95%) |\n"
            "|---|---|---:|---:|---:|---:|\n")
    return head + _known("exact_match", "vs") + "\n\nGenerated from [tasks.json](tasks.json) (`python " \
        "scripts/readme_results.py`): mean of the seeds (each seed in brackets, %); ▲/▼ called under Holm, △/▽ " \
        "under Benjamini-Hochberg only, = equivalent within ±2 points, nothing: not resolved.\n"


def tasks_tokens() -> str:
    """The same for answer-token accuracy (counting left out: its answers are one token, as exact match)."""
    head = ("| task (steps) | split | learned | RoPE | CoPE | CoPE − RoPE |\n|---|---|---:|---:|---:|---:|\n")
    rows = [line for line in _known("token_accuracy", "token_vs").split("\n") if not line.startswith("| counting")]
    return head + "\n".join(rows) + "\n"


def tasks_trajectory() -> str:
    """Where trajectory stands on the tasks: its differences to RoPE, CoPE and ALiBi (exact match, points)."""
    data = _load("tasks/tasks.json")
    cols = [("trajectory_rope", "rope"), ("trajectory_rope_learnable", "rope"), ("trajectory_rope", "cope"),
            ("trajectory_alibi", "alibi"), ("trajectory_alibi_learnable", "alibi")]
    rows = ["| task | split | trajectory on RoPE − RoPE | learnable − RoPE | trajectory on RoPE − CoPE "
            "| on ALiBi − ALiBi (fixed / learnable) |", "|---|---|---:|---:|---:|---:|"]
    for task, split, label in KNOWN_SPLITS:
        res = data["tasks"][task]["results"]
        cells = []
        for model, ref in cols:
            d = res.get(model, {}).get(split, {}).get("vs", {}).get(ref)
            cells.append(_diff_points(d))
        rows.append(f"| {task.replace('_', ' ')} | {label} | {cells[0]} | {cells[1]} | {cells[2]} | "
                    f"{cells[3]} / {cells[4]} |".replace("- / -", "-"))
    strengths = {}
    for s in data["training"]:
        if "learned_strength" in s and s.get("steps") == data["tasks"][s["task"]]["steps"]:
            strengths.setdefault((s["task"], s["name"]), []).append(s["learned_strength"])
    words = "; ".join(f"{t.replace('_', ' ')}, {n.replace('_learnable', '').replace('_', ' on ')}: "
                      f"{min(v):.3f}-{max(v):.3f}" for (t, n), v in sorted(strengths.items()))
    return "\n".join(rows) + ("\n\nLearnable strength at the end of training (from 0.2, every seed, at the "
                              f"task's reported budget): {words}.\n")


METHOD_LABEL = {"stock": "stock (extrapolation)", "pi": "PI (`linear`)", "ntk": "static NTK (`ntk`)",
                "dynamic": "dynamic NTK", "yarn": "YaRN", "content": "content-aware (`extend`)",
                "content_yarn": "content-aware steps over YaRN", "content_tuned": "content-aware, strength chosen",
                "content_learned": "content-aware, strength learned",
                "content_yarn_tuned": "content-aware steps over YaRN, strength chosen",
                "content_yarn_learned": "content-aware steps over YaRN, strength learned"}


def _mark_ext(c: dict | None) -> str:
    if c is None:
        return ""
    v = c["verdict"]
    eq = "=" if "; equivalent" in v or "yet equivalent" in v else ""
    sig = "▲" if v.startswith("better") else "▼" if v.startswith("worse") else ""
    return sig + eq or "?"


def _ext_ppl(part: str) -> str:
    data = _load("extension/study/study.json")
    table = data["perplexity"][part]
    factors = sorted(next(iter(table.values())), key=float)
    T = data["config"]["data"]["block_size"]
    by = {(c["model"], c["factor"]): c for c in data["comparisons"][part] if c["reference"] == "stock"}
    best = {f: min(table[m][f]["all types"]["ppl"] for m in table) for f in factors}
    rows = ["| method | " + " | ".join(f"{f}x ({int(f) * T:,} tokens)" for f in factors) + " |",
            "|---|" + "---:|" * len(factors)]
    for m, per_f in table.items():
        cells = []
        for f in factors:
            p = per_f[f]["all types"]
            value = f"**{p['ppl']:.2f}**" if p["ppl"] == best[f] else f"{p['ppl']:.2f}"
            cells.append(f"{value} [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}] {_mark_ext(by.get((m, f)))}".rstrip())
        rows.append(f"| {METHOD_LABEL.get(m, m)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def extension_zero_shot() -> str:
    """The extension study's zero-shot perplexity, every type pooled, marks against stock (declared correction)."""
    return _ext_ppl("pretrain")


def extension_finetuned() -> str:
    return _ext_ppl("finetune")


def extension_content(study: str = "extension/study/study.json") -> str:
    """The content-aware extension against PI and YaRN, zero-shot and fine-tuned, under both corrections (the
    declared one first, the other in parentheses where it differs)."""
    data = _load(study)
    comps = data["comparisons"]
    other = "holm" if data["config"].get("correction", "bh") == "bh" else "bh"
    other_name = {"holm": "Holm", "bh": "BH"}[other]
    pairs = [tuple(p) for p in data["config"]["comparisons"]]
    factors = sorted({c["factor"] for c in comps["pretrain"]}, key=float)
    head = ("| comparison | " + " | ".join(f"zero-shot {f}x" for f in factors) + " | "
            + " | ".join(f"fine-tuned {f}x" for f in factors) + " |")
    rows = [head, "|---|" + "---:|" * (2 * len(factors))]
    for m, r in pairs:
        cells = []
        for part in ("pretrain", "finetune"):
            by = {c["factor"]: c for c in comps.get(part, []) if c["model"] == m and c["reference"] == r}
            for f in factors:
                c = by.get(f)
                if c is None:
                    cells.append("-")
                    continue
                beside = ("" if c[f"verdict_{other}"] == c["verdict"]
                          else f" ({other_name} {_mark_ext({'verdict': c[f'verdict_{other}']})})")
                cells.append(f"{c['value']:+.1f} [{c['ci'][0]:+.1f}, {c['ci'][1]:+.1f}] {_mark_ext(c)}{beside}")
        rows.append(f"| {METHOD_LABEL.get(m, m)} vs {METHOD_LABEL.get(r, r)} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def extension_content_tuned() -> str:
    """The content-aware extension with its strength chosen on validation and learned, against PI, YaRN and the
    untuned strength (configs/study/extension_content.yaml, Holm declared)."""
    return extension_content("extension/study_content/study.json")


def extension_content_chosen() -> str:
    """What the validation chose, per factor (how many seeds chose each strength), and the learned strengths."""
    data = _load("extension/study_content/study.json")
    factors = sorted(next(iter(data["perplexity"]["pretrain"].values())), key=float)
    rows = ["| method | part | " + " | ".join(f"{f}x" for f in factors) + " |", "|---|---|" + "---:|" * len(factors)]
    for part, label in (("pretrain", "zero-shot"), ("finetune", "fine-tuned")):
        for method, by_f in data.get("chosen", {}).get(part, {}).items():
            cells = []
            for f in factors:
                values = [c["value"] for c in by_f.get(f, [])]
                cells.append(", ".join(f"{v:g} x{values.count(v)}" for v in sorted(set(values))) or "-")
            rows.append(f"| {METHOD_LABEL.get(method, method)} | {label} | " + " | ".join(cells) + " |")
    learned: dict[str, list[float]] = {}
    for run in data["summaries"]:
        if run.get("part") == "finetune" and "learned_strength" in run:
            learned.setdefault(run["name"], []).append(run["learned_strength"])
    words = "; ".join(f"{METHOD_LABEL.get(n, n)} {min(v):.3f}-{max(v):.3f}" for n, v in learned.items())
    seeds = len(data["config"]["seeds"])
    return "\n".join(rows) + f"\n\nLearned strength after the fine-tune (from 0.5, {seeds} seeds): {words}.\n"


def extension_published() -> str:
    """The orderings the literature reports, read off the comparisons under the declared correction and Holm."""
    data = _load("extension/study/study.json")
    cfg = data["config"]
    factors = sorted({c["factor"] for c in data["comparisons"]["pretrain"]}, key=float)
    rows = ["| ordering (" + ", ".join(f"{f}x" for f in factors) + ") | " + cfg["correction"].upper().replace(
        "BH", "Benjamini-Hochberg").replace("HOLM", "Holm") + " (declared) | Holm |", "|---|---|---|"]

    def state(v: str) -> str:
        if v.startswith("better"):
            return "reproduced"
        if v.startswith("worse"):
            return "contradicted"
        return "equivalent ±5%" if "; equivalent" in v else "not resolved"

    for claim in cfg["published"]:
        part = claim.get("part", "pretrain")
        by = {c["factor"]: c for c in data["comparisons"].get(part, [])
              if c["model"] == claim["model"] and c["reference"] == claim["reference"]}
        declared = ", ".join(f"{state(by[f]['verdict'])} ({by[f]['value']:+.1f}%)" for f in factors if f in by)
        holm = ", ".join(state(by[f]["verdict_holm"]) for f in factors if f in by)
        rows.append(f"| {claim['claim']} | {declared} | {holm} |")
    return "\n".join(rows) + "\n"


def _long_context(rel: str, labels: dict[str, str]) -> str:
    data = _load(rel)
    models = data["models"]
    first = next(iter(models.values()))
    windows = [w["label"] for w in first["windows"]["all"]]
    best = {i: min(m["windows"]["all"][i]["ppl"] for m in models.values()) for i in range(len(windows))}
    trained = data["trained_length"]
    names = []
    for w in first["windows"]["all"]:
        lo, hi = (int(round(x * trained / 1024)) for x in (w["low"], w["high"]))
        names.append(f"{lo}k-{hi}k" if lo else f"0-{hi}k")
    lengths = " / ".join(f"{p['length'] // 1024}k" for p in first["passkey"])
    rows = ["| method (factor 2) | " + " | ".join(names) + f" | passkey {lengths} |",
            "|---|" + "---:|" * len(windows) + ":---:|"]
    for name, m in models.items():
        cells = []
        for i, w in enumerate(m["windows"]["all"]):
            value = f"**{w['ppl']:.2f}**" if w["ppl"] == best[i] else f"{w['ppl']:.2f}"
            cells.append(f"{value} [{w['ci'][0]:.2f}, {w['ci'][1]:.2f}]")
        keys = " / ".join(f"{p['right']}/{p['trials']}" for p in m["passkey"])
        rows.append(f"| {labels.get(name, name)} | " + " | ".join(cells) + f" | {keys} |")
    docs = sum(len(v) for v in data["documents"].values())
    return "\n".join(rows) + (f"\n\nIn brackets: the lowest and highest of the {docs} documents' values (a 95% "
                              f"bootstrap over {docs} documents gives no more than that range); bold: the lowest "
                              "perplexity of the window; passkey: right / trials, one trial per length.\n")


REAL_LABELS = {"stock": "stock (no scaling)", "pi": "position interpolation (`linear`)", "ntk": "static NTK (`ntk`)",
               "dynamic": "dynamic NTK (`dynamic`)", "yarn": "YaRN (`yarn`)",
               "content": "content-aware (`trajectory`, `extend=2`, strength 0.5)",
               "content_yarn": "content-aware steps over YaRN (`extend=1`, strength 0.5)"}


def extension_real_16k() -> str:
    return _long_context("extension/study/real/long_context.json", REAL_LABELS)


def extension_real_12k() -> str:
    return _long_context("extension/smollm2/long_context.json",
                         {f"{k}_x2" if k != "stock" else k: v for k, v in REAL_LABELS.items()})


def content_standing() -> str:
    """Where trajectory on RoPE stands against RoPE, CoPE and ALiBi in the content study (re-judged)."""
    data = _load("study/rejudged.json")
    by = {(g["model"], g["reference"]): g["deltas"] for g in data["groups"]}
    cols = [(("trajectory_rope", "rope"), "128"), (("trajectory_rope", "cope"), "128"),
            (("trajectory_rope", "cope"), "512"), (("trajectory_rope", "alibi"), "128"),
            (("trajectory_rope", "alibi"), "512")]
    rows = ["| content type | vs RoPE (own base), 128 | vs CoPE, 128 | vs CoPE, 512 | vs ALiBi, 128 | vs ALiBi, 512 |",
            "|---|---:|---:|---:|---:|---:|"]
    for ctype in by[("trajectory_rope", "rope")]:
        if ctype == "random_content":
            continue
        cells = []
        for pair, length in cols:
            d = by[pair][ctype][length]
            mark = {"better": " ▲", "worse": " ▼"}.get(d.get("significance_bh", ""), "")
            mark = {"better": " ▲▲", "worse": " ▼▼"}.get(d["significance"], mark)
            digits = 1 if max(abs(d["ci"][0]), abs(d["ci"][1])) < 100 else 0
            cells.append(f"{d['delta_pct']:+.{digits}f} [{d['ci'][0]:+.{digits}f}, {d['ci'][1]:+.{digits}f}]{mark}")
        rows.append(f"| {ctype} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + ("\n\nGenerated from [study/rejudged.json](study/rejudged.json) (`python "
                              "scripts/readme_results.py`): ▲/▼ better/worse at a 5% false discovery rate, ▲▲/▼▼ "
                              "also under Holm.\n")


#: the generated blocks of each file (relative to the repository root): README.md's, then the results' own
FILES: dict[str, dict[str, Callable[[], str]]] = {
    "README.md": TABLES,
    "docs/results/README.md": {"content_standing": content_standing},
    "docs/results/ruler/smollm2_haystacks/README.md": {"ruler_haystacks": ruler_haystacks},
    "docs/results/tasks/README.md": {"tasks_known": tasks_known, "tasks_tokens": tasks_tokens,
                                     "tasks_trajectory": tasks_trajectory},
    "docs/results/extension/README.md": {"extension_zero_shot": extension_zero_shot,
                                         "extension_finetuned": extension_finetuned,
                                         "extension_content": extension_content,
                                         "extension_content_tuned": extension_content_tuned,
                                         "extension_content_chosen": extension_content_chosen,
                                         "extension_published": extension_published,
                                         "extension_real_16k": extension_real_16k,
                                         "extension_real_12k": extension_real_12k},
}


if __name__ == "__main__":
    sys.exit(main())
