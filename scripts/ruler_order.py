"""The RULER order table: which ways of extending a model RULER can order, per length and kind of haystack.

    python scripts/ruler_order.py run --config configs/ruler/smollm2_order.yaml [--device cuda] [--gpu-lengths]
    python scripts/ruler_order.py run --config ... --lengths 16384 --tasks niah_multikey_1 --haystacks noise \\
        --samples 10 --step 1 --threads 1          # a CPU sitting: one prompt per cell and method per round
    python scripts/ruler_order.py analyse --config configs/ruler/smollm2_order.yaml
    python scripts/ruler_order.py cost --config configs/ruler/smollm2_order.yaml

``run`` reads every method valid at each length on the same prompts (``hf_trajpe.evaluation.ruler``), saving each
row as it is scored to ``<out>/len_<length>/ruler_rows.jsonl``; the same command continues, and a later sitting with
more ``--samples`` adds prompts after the ones made (the prompts of a cell do not depend on how many are asked).
``--step K`` makes the prompts in rounds of ``K`` per cell and method, so a sitting cut short leaves every method
with the same prompts. Under ``accelerate launch`` the prompts are spread over the processes.
``analyse`` gives the cells, retention and the declared comparisons with Holm's correction
(:mod:`hf_trajpe.evaluation.ruler.order`) as ``<out>/order.json``, ``order.md`` and ``order.png``.
``cost`` says how many prompts the config makes per length and method, and what they cost at the CPU seconds per
prompt measured in the rows so far.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROWS = "ruler_rows.jsonl"


def load_config(path: str | Path) -> dict:
    import yaml

    cfg = yaml.safe_load(Path(path).read_text())
    missing = [k for k in ("model", "out", "tasks", "lengths", "samples", "methods", "order") if k not in cfg]
    if missing:
        raise SystemExit(f"{path}: missing key(s) {', '.join(missing)}")
    return cfg


def methods_at(cfg: dict, length: int, only: list[str] | None = None) -> dict[str, dict | None]:
    """name -> patch of the methods the config reads at ``length`` (``only``: those names alone)."""
    out = {}
    for name, spec in cfg["methods"].items():
        if only and name not in only:
            continue
        if length in (spec.get("lengths") or [length]):
            out[name] = spec.get("patch")
    return out


def rows_path(cfg: dict, length: int) -> Path:
    return Path(cfg["out"]) / f"len_{length}" / ROWS


def _rounds(samples: int, step: int | None) -> list[int]:
    if not step or step >= samples:
        return [samples]
    return [*range(step, samples, step), samples]


def run(cfg: dict, args: argparse.Namespace) -> int:
    from hf_trajpe.evaluation.ruler.methods import evaluate_ruler

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    lengths = args.lengths or cfg["lengths"] + (cfg.get("gpu_lengths", []) if args.gpu_lengths else [])
    unknown = sorted(set(args.methods or []) - set(cfg["methods"]))
    if unknown:
        raise SystemExit(f"unknown method(s) {', '.join(unknown)}; the config's: {', '.join(cfg['methods'])}")
    samples = args.samples or cfg["samples"]
    for samples_now in _rounds(samples, args.step):
        for length in lengths:
            methods = methods_at(cfg, length, args.methods)
            if not methods:
                continue
            print(f"ruler_order: {length:,} tokens, {samples_now} prompt(s) per cell, {', '.join(methods)}",
                  file=sys.stderr, flush=True)
            evaluate_ruler({m: cfg["model"] for m in methods}, {m: p for m, p in methods.items() if p is not None},
                           tokenizer=cfg.get("tokenizer"),
                           tasks=args.tasks or cfg["tasks"], lengths=[length], samples=samples_now,
                           haystacks=args.haystacks or cfg.get("haystacks"), seed=cfg.get("seed", 0),
                           progress=not args.no_progress, dtype=args.dtype or cfg.get("dtype", "float32"),
                           rows_file=rows_path(cfg, length), device=args.device)
    return 0


def read_rows(cfg: dict) -> list[dict]:
    """Every saved row under ``out`` (part files of a spread run that was cut short folded in first); rows files of
    another dtype or seed than the first are refused: one table is read one way."""
    from hf_trajpe.evaluation.ruler.rows import RowsFile

    rows, first = [], None
    for path in sorted(Path(cfg["out"]).glob(f"len_*/{ROWS}")):
        try:
            header = json.loads(path.open().readline())["header"]
        except (ValueError, KeyError, TypeError):
            print(f"ruler_order: {path} has no header yet (no row saved): left out", file=sys.stderr)
            continue
        made = (header.get("dtype"), header.get("seed"))
        if first is not None and made != first[0]:
            raise SystemExit(f"{path} was read in {made[0]} with seed {made[1]}, {first[1]} in {first[0][0]} with "
                             f"seed {first[0][1]}: one table is one dtype and seed; give each its own --out")
        first = first or (made, path)
        rows += RowsFile(path, header).fold().values()
    return rows


def plan_of(cfg: dict):
    from hf_trajpe.evaluation.ruler.order import OrderPlan

    o = cfg["order"]
    return OrderPlan(baseline=o["baseline"], extensions=tuple(m for m in cfg["methods"] if m != o["baseline"]),
                     reference_length=o["reference_length"], main_length=o["main_length"],
                     later_lengths=tuple(o.get("later_lengths", [])),
                     real_haystacks=tuple(o.get("real_haystacks", ("real_code", "real_prose"))),
                     generated_haystacks=tuple(o.get("generated_haystacks", ("noise",))),
                     leading=o.get("leading", 3), level=o.get("level", 0.05))


def _costs(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["length"]), []).append(r)
    return [{"method": m, "length": n, "prompts": len(v),
             "cpu_seconds_per_prompt": sum(r.get("cpu_seconds", 0.0) for r in v) / len(v),
             "wall_seconds_per_prompt": sum(r.get("wall_seconds", 0.0) for r in v) / len(v)}
            for (m, n), v in sorted(groups.items())]


def _fmt_cell(c: dict | None) -> str:
    if c is None:
        return ""
    return f"{c['mean']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}] ({c['n']})"


def _p(x: float) -> str:
    return f"{x:.2g}" if x < 0.01 else f"{x:.3f}"


def _comparison_rows(comparisons: list[dict]) -> list[str]:
    lines = ["| length | A | B | prompts | A | B | A - B [95% interval] | p | p (Holm) | verdict |",
             "|---:|---|---|---:|---:|---:|---|---:|---:|---|"]
    for c in comparisons:
        ci = f" [{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}]" if "ci" in c else ""
        lines.append(f"| {c['length']:,} | {c['a']} | {c['b']} | {c['n']} | {c['mean_a']:.2f} | {c['mean_b']:.2f} | "
                     f"{c['diff']:+.2f}{ci} | {_p(c['p_value'])} | {_p(c['p_holm'])} | {c['verdict']} |")
    return lines


def markdown(result: dict, cfg: dict, costs: list[dict], chart: str | None) -> str:
    plan = result["plan"]
    pooled = {(c["method"], c["length"]): c for c in result["pooled"]}
    retention = {(r["method"], r["length"]): r for r in result["retention"]}
    lengths = sorted({c["length"] for c in result["pooled"]})
    ns = [c["n"] for c in result["cells"]]
    lines = [f"# RULER order table: {cfg['model']}\n",
             f"Rows: {sum(ns)} scored prompts in {len(result['cells'])} cells (method x task x haystack x length), "
             f"{min(ns) if ns else 0} to {max(ns) if ns else 0} prompts per cell; the plan asks {cfg['samples']}. "
             "Scores: mean with the exact (Clopper-Pearson) 95% interval, prompts in brackets; retention: the pooled "
             f"score at a length over the same method's at {plan['reference_length']:,} on the same tasks and "
             "haystacks.\n",
             "## Pooled over tasks and haystacks\n",
             "| method | " + " | ".join(f"{n:,}" for n in lengths) + " | retention |",
             "|---|" + "---|" * len(lengths) + "---|"]
    for m in (plan["baseline"], *plan["extensions"]):
        if not any((m, n) in pooled for n in lengths):
            continue
        ret = ", ".join(f"{n:,}: {r['retention']:.2f}" if r["retention"] is not None else f"{n:,}: -"
                        for n in lengths if (r := retention.get((m, n))))
        lines.append(f"| {m} | " + " | ".join(_fmt_cell(pooled.get((m, n))) for n in lengths) + f" | {ret} |")
    main = plan["main_length"]
    hays = sorted({c["haystack"] for c in result["cells"] if c["length"] == main})
    if hays:
        lines += [f"\n## At {main:,} tokens, per haystack (pooled over tasks)\n",
                  "| method | " + " | ".join(hays) + " |", "|---|" + "---|" * len(hays)]
        for m in (plan["baseline"], *plan["extensions"]):
            cells = [c for c in result["cells"] if c["method"] == m and c["length"] == main]
            if not cells:
                continue
            out = []
            for h in hays:
                got = [c for c in cells if c["haystack"] == h]
                if not got:
                    out.append("")
                    continue
                total = sum(c["n"] for c in got)
                mean = sum(c["mean"] * c["n"] for c in got) / total
                out.append(f"{mean:.2f} ({total})")
            lines.append(f"| {m} | " + " | ".join(out) + " |")
    lines += ["\n## Primary comparisons (declared; Holm over the family)\n", *_comparison_rows(result["primary"]),
              "\n## Secondary comparisons (Holm within themselves)\n", *_comparison_rows(result["secondary"])]
    content = next((c for c in result["primary"] if c["a"] == "real text"), None)
    if content:
        per = ", ".join(f"{h} {v['found']}/{v['n']}" for h, v in content["per_haystack"].items())
        lines.append(f"\nThe content question at {content['length']:,} tokens (needle tasks): the share of "
                     f"extensions that found a prompt's needle, {content['mean_a']:.2f} over {content['n_a']} prompts "
                     f"of real text against {content['mean_b']:.2f} over {content['n_b']} of generated text "
                     f"({content['test']}; found / read per haystack: {per}); {content['verdict']}.")
    if costs:
        lines += ["\n## Cost per prompt (from the rows)\n", "| method | length | prompts | CPU s | wall s |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {c['method']} | {c['length']:,} | {c['prompts']} | {c['cpu_seconds_per_prompt']:.0f} | "
                  f"{c['wall_seconds_per_prompt']:.0f} |" for c in costs]
    if chart:
        lines.append(f"\n![score against length]({chart})")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = result["plan"]
    hays = sorted({c["haystack"] for c in result["cells"]})
    fig, axes = plt.subplots(1, len(hays), figsize=(3.4 * len(hays), 3.0), squeeze=False)
    for ax, hay in zip(axes[0], hays, strict=True):
        for k, m in enumerate((plan["baseline"], *plan["extensions"])):
            cells = [c for c in result["cells"] if c["method"] == m and c["haystack"] == hay]
            by_len: dict[int, list[dict]] = {}
            for c in cells:
                by_len.setdefault(c["length"], []).append(c)
            if not by_len:
                continue
            xs = sorted(by_len)
            ys = [sum(c["mean"] * c["n"] for c in by_len[n]) / sum(c["n"] for c in by_len[n]) for n in xs]
            ax.plot(xs, ys, marker="o", label=m, color=f"C{k % 10}", linestyle="-" if k < 10 else "--")
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(hay, fontsize=9)
        ax.set_xlabel("prompt length (tokens)", fontsize=8)
    axes[0][0].set_ylabel("score (pooled over tasks)", fontsize=8)
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def analyse(cfg: dict, args: argparse.Namespace) -> int:
    from hf_trajpe.evaluation.ruler.order import analyse as analyse_rows

    rows = read_rows(cfg)
    if not rows:
        raise SystemExit(f"no rows under {cfg['out']}: run `python scripts/ruler_order.py run --config ...` first")
    result = analyse_rows(rows, plan_of(cfg))
    out = Path(cfg["out"])
    costs = _costs(rows)
    result["costs"] = costs
    (out / "order.json").write_text(json.dumps(result, indent=1) + "\n")
    chart = None
    try:
        plot(result, out / "order.png")
        chart = "order.png"
    except ImportError:
        pass
    (out / "order.md").write_text(markdown(result, cfg, costs, chart))
    print(f"ruler_order: {len(rows)} rows -> {out / 'order.json'}, {out / 'order.md'}")
    return 0


def cost(cfg: dict, args: argparse.Namespace) -> int:
    from hf_trajpe.evaluation.ruler.runner import _plan

    cells = len(_plan(cfg["tasks"], cfg.get("haystacks")))
    measured = {(c["method"], c["length"]): c["cpu_seconds_per_prompt"] for c in _costs(read_rows(cfg))}
    total_prompts, total_known = 0, 0.0
    for length in cfg["lengths"] + cfg.get("gpu_lengths", []):
        for m in methods_at(cfg, length):
            n = cells * cfg["samples"]
            total_prompts += n
            per = measured.get((m, length))
            total_known += n * per if per else 0.0
            print(f"{length:>6} {m:<16} {n:>5} prompts" + (f", {per:.0f} CPU s each measured" if per else ""))
    print(f"{total_prompts:,} prompts; {total_known / 3600:.1f} CPU hours for those with a measured cost")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("action", choices=("run", "analyse", "cost"))
    p.add_argument("--config", required=True)
    p.add_argument("--out", default=None, help="rows and analysis folder instead of the config's (a run in another "
                                                "dtype, such as a GPU's bfloat16, needs its own)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (run; default: %(default)s)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "auto"), default=None,
                   help="the dtype to read in (run; default: the config's)")
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="these lengths only (run)")
    p.add_argument("--gpu-lengths", action="store_true", help="add the config's gpu_lengths (run)")
    p.add_argument("--methods", nargs="+", default=None, help="these methods only (run)")
    p.add_argument("--tasks", nargs="+", default=None, help="these tasks only (run)")
    p.add_argument("--haystacks", nargs="+", default=None, help="these haystacks only (run)")
    p.add_argument("--samples", type=int, default=None, help="prompts per cell in this sitting (run; default: the "
                                                                "config's)")
    p.add_argument("--step", type=int, default=None, help="rounds of this many prompts per cell and method (run)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (run)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    if args.out:
        cfg["out"] = args.out
    return {"run": run, "analyse": analyse, "cost": cost}[args.action](cfg, args)


if __name__ == "__main__":
    sys.exit(main())
