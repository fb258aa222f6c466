"""The recovery study's report: ``recovery.md`` and ``recovery.json`` in ``report_dir`` (the curves, the steps to
reach the stock line, the recovered shares per content type), with the config of each run in ``configs/``."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["recovery_lines", "steps_to_stock", "write_recovery_report"]


def _share(r: dict) -> str:
    if r["recovered"] is None:
        return r.get("status", "no damage")
    ci = f" [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]" if r["ci"] is not None else ""
    return f"{r['recovered']:.2f}{ci}"


def _percent(r: dict, key: str) -> str:
    lo, hi = r[f"{key}_ci"]
    return f"{100 * r[key]:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def recovery_lines(shares: dict, runs: list, chunks: int, block: int, seeds: int = 1) -> list[str]:
    """Per swapped encoding, a table: one row per layer selection, one column per content type (``runs``: the
    study's :class:`~.config.RecoveryRun` list, the native one left out; ``seeds``: training seeds per run)."""
    if not shares:
        return []
    types = list(next(iter(shares.values())))
    how = ("95% interval from resampling the chunks (paired)" if seeds == 1 else
           f"share and gap: the mean over the {seeds} training seeds (the gap paired with the native run of the same "
           "seed), 95% interval from Student's t over the seeds plus the chunks' standard error; the damage (no "
           "training) from resampling the chunks")
    lines = ["## Recovered share of the swap's damage, per content type", "",
             "`(ppl_swapped - ppl_tuned) / (ppl_swapped - ppl_stock)`: 1 = back to the stock model, 0 = no better "
             "than the untuned swap (above 1: better than the stock model, which tuning on this text makes any model; "
             f"below 0: worse than the untuned swap). Each model scored on the same test chunks ({chunks} of {block} "
             f"tokens per type at most); {how}. Perplexities and each seed's values in `recovery.json`.", ""]
    tables = [("recovered share", _share), ("damage of the swap, `ppl_swapped / ppl_stock - 1`",
                                             lambda r: _percent(r, "damage"))]
    if "gap" in next(iter(next(iter(shares.values())).values())):
        tables.append(("gap after tuning to the stock model tuned the same way (`native`), `ppl_tuned / "
                       "ppl_native_tuned - 1`", lambda r: _percent(r, "gap")))
    lines[-1:-1] = ["", "A share is given only where the damage is resolved (its interval above 0; else \"damage not "
                    "resolved\": a ratio over a damage that may be 0 has no interval). The gap, where the native run "
                    "is part of the study, compares the tuned swap with the stock model tuned the same way: it stays "
                    "meaningful where the swap barely hurt."]
    for encoding in dict.fromkeys(r.encoding for r in runs):
        rows = [(r.name, r.layers) for r in runs if r.encoding == encoding and r.name in shares]
        for title, cell in tables:
            lines += [f"**{encoding}**: {title}", "", "| layers swapped | " + " | ".join(types) + " |",
                      "|---|" + "---:|" * len(types)]
            for name, layers in rows:
                lines.append(f"| {layers or 'all'} | " + " | ".join(cell(shares[name][t]) for t in types) + " |")
            lines.append("")
    return lines


def steps_to_stock(points: list[dict], stock: float) -> int | None:
    return next((p["step"] for p in points if p["perplexity"] <= stock), None)


def _cell(point: dict) -> str:
    """A curve's perplexity at one step: the mean over seeds and, with several, their range."""
    seeds = point.get("per_seed")
    spread = f" ({min(seeds):.2f}-{max(seeds):.2f})" if seeds and len(seeds) > 1 else ""
    return f"{point['perplexity']:.2f}{spread}"


def _reach(curve: dict[int, list[dict]] | None, points: list[dict], stock: float, last: int) -> str:
    def one(c: list[dict]) -> str:
        r = steps_to_stock(c, stock)
        return f"step {r}" if r is not None else f"not within {last}"

    if not curve:
        return one(points)
    return f"{one(points)} (per seed: {', '.join(one(c) for c in curve.values())})"


def write_recovery_report(out: Path, result: dict, command: str | None) -> dict[str, Path]:
    """``result``: the suite's evaluation (curves, stock perplexity, seconds, seconds per step, shares, the
    swapped runs, chunks, the experiment config, whether the extrapolation was evaluated, threads)."""
    curves, stock, cfg = result["curves"], result["stock"], result["experiment"]
    steps = sorted({p["step"] for c in curves.values() for p in c})
    model = Path(str(cfg["model"]["path"]).split(":", 1)[-1]).name
    lines = [f"# Recovery after swapping the encoding of `{model}`", ""]
    if command:
        lines += [f"Command: `{command}`.", ""]
    seeds = result.get("seeds") or [0]
    per_seed = result.get("curves_per_seed") or {}
    seed_text = "one seed" if len(seeds) == 1 else (
        f"{len(seeds)} seeds ({', '.join(map(str, seeds))}): each cell the mean over seeds, their range in brackets")
    lines += [f"LoRA r {cfg['model']['lora']['r']} on every projection, {cfg['train']['batch_size']} x "
              f"{cfg['data']['block_size']} tokens a step, lr {cfg['optimizer']['lr']} ({cfg['schedule']['name']}), "
              f"real_text validation files ({cfg['data']['eval_blocks']} blocks) scored every "
              f"{cfg['train']['eval_every']} steps; {seed_text}.", ""]
    data = result.get("data")
    if data:
        lines += [f"Training data (built from the experiment config every run shares; the seed changes the adapters' "
                  f"initialisation and the order of the batches): {data['blocks']} blocks, {data['tokens']:,} tokens, "
                  f"SHA-256 of the token ids `{data['sha256'][:16]}`.", ""]
    if stock is not None:
        lines += [f"Stock model (no swap, no training): perplexity **{stock:.2f}**.", ""]
    lines += ["| step | " + " | ".join(curves) + " |", "|---:|" + "---:|" * len(curves)]
    for s in steps:
        row = [next((_cell(p) for p in c if p["step"] == s), "") for c in curves.values()]
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    if stock is not None:
        lines += ["", "Steps to the stock perplexity: " + "; ".join(
            f"{e} {_reach(per_seed.get(e), c, stock, steps[-1])}" for e, c in curves.items()) + "."]
    steps_text = ", ".join(f"{e} {s:.1f}" for e, s in result["per_step"].items())
    wall_text = ", ".join(f"{e} {s:.0f}" for e, s in result["seconds"].items())
    lines += ["", f"Training seconds per step (median of the logged windows; {result['threads'] or 'all'} thread(s) "
              f"per run, {os.cpu_count()} CPU cores): {steps_text}. Wall time per run (s; loading, evaluations and "
              f"saving included{'' if len(seeds) == 1 else '; the mean over seeds'}): {wall_text}.", ""]
    lines += recovery_lines(result["shares"], result["runs"], result["chunks"], int(cfg["data"]["block_size"]),
                            len(seeds))
    if result["evaluated"] or (out / "eval_real_text" / "report.md").is_file():
        lines += ["The final models against the stock model at 1x, 2x and 4x the training length: on the held-out "
                  "real_text files, [eval_real_text/report.md](eval_real_text/report.md); per content type, "
                  "[eval_types/report.md](eval_types/report.md).", ""]
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "recovery.md", out / "recovery.json"
    md.write_text("\n".join(lines))
    js.write_text(json.dumps({"curves": curves, "stock_perplexity": stock, "seconds": result["seconds"],
                              "recovered": result["shares"], "config": cfg, "seeds": seeds,
                              **({"curves_per_seed": per_seed} if per_seed else {}),
                              **({"training_data": data} if data else {})}, indent=2) + "\n")
    return {"study_md": md, "recovery_json": js}
