"""Markdown for a benchmark result (the JSON holds the same figures, unrounded).

Time ratios are paired: the median of per-round ratios (patched / the stock run next to it) with its
95% bootstrap interval and the number of rounds; the ratio of medians is kept, labelled unpaired.
"""

from __future__ import annotations

__all__ = ["to_markdown"]


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def _cfg(c: dict) -> str:
    return (f"{c['model_type']}, {c['layers']} layers, {c['width']} wide, {c['heads']} heads, vocab {c['vocab']}, "
            f"{c['parameters'] / 1e6:.1f}M parameters, {c['attention']}")


def _meta(meta: dict) -> list[str]:
    lines = ["| | |", "|---|---|"]
    keys = ("date_utc", "size", "device", "gpu", "dtype", "clock", "cpu", "cpu_bfloat16", "cpu_count", "torch_threads",
            "torch", "cuda", "transformers", "hf_trajpe", "python", "platform", "load_average", "load_average_end",
            "wall_s")
    for k in keys:
        if k in meta:
            v = meta[k]
            if isinstance(v, list):
                v = ", ".join(f"{x:.2f}" for x in v)
            elif isinstance(v, dict):
                v = ", ".join(f"{name} {value}" for name, value in v.items())
            lines.append(f"| {k} | {v} |")
    return lines


def _iv(interval: list | None, rounds: int | None = None) -> str:
    if interval is None:
        return ""
    if rounds is not None and rounds < 2:
        return "n/a (1 round)"
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]"


_VERDICT = {"met": "met", "missed": "**missed**", "unresolved": "unresolved", "no limit": "no limit"}


def _targets(rows: list[dict]) -> list[str]:
    out = ["Time rows: the median of the paired per-round ratios, its 95% bootstrap interval and the rounds; "
           "met only if the whole interval is within the limit, missed only if it is all above, unresolved "
           "otherwise (or with fewer than 6 rounds). Memory rows are deterministic counts (no interval).", "",
           "| target | model / shape | encoding | paired ratio | 95% interval | rounds | limit | verdict "
           "| base encoding alone |",
           "|---|---|---|---:|---|---:|---:|---|---|"]
    for r in rows:
        base = ""
        if r.get("base_measured") is not None:
            base = f"{r['base_encoding']}: {r['base_measured']:.3f}"
            if r.get("base_interval") is not None and (r.get("rounds") or 0) >= 2:
                base += f" {_iv(r['base_interval'])}"
        rounds = "" if r.get("rounds") is None else str(r["rounds"])
        iv = _iv(r.get("interval"), r.get("rounds"))
        out.append(f"| {r['what']} | {r['where']} | {r['variant']} | {r['measured']:.3f} | {iv} "
                   f"| {rounds} | {'' if r['limit'] is None else format(r['limit'], '.2f')} "
                   f"| {_VERDICT[r['verdict']]} | {base} |")
    return out


def _decided(res: dict) -> str:
    """What the rounds that decide unresolved targets did, if any were asked for."""
    d = res.get("decide")
    if not d or d["stopped"] == "none":
        return ""
    added = {k: v for k, v in d["rounds_added"].items() if v}
    more = ", ".join(f"{k} +{v}" for k, v in added.items()) if added else "none needed"
    return f"; deciding rounds: {more}, stopped: {d['stopped']}"


def _rounds(res: dict) -> str:
    return (f"{res['rounds']} paired rounds (at least {res['repeats']}, at most {res['max_rounds']}; stopped: "
            f"{res['stopped']}{_decided(res)})")


def _timing_table(res: dict, key: str, unit: str = "s") -> list[str]:
    out = [f"| encoding | median {unit} | paired ratio | 95% interval | rounds | ratio of medians (unpaired) |",
           "|---|---:|---:|---|---:|---:|",
           f"| stock | {res['stock'][key]:.4f} | | | | |"]
    for label, figs in res["variants"].items():
        f = figs[key]
        out.append(f"| {label} | {f['median']:.4f} | {f['paired_ratio']:.3f} | {_iv(f['interval'], f['rounds'])} | "
                   f"{f['rounds']} | {f['ratio_of_medians']:.3f} |")
    return out


def _encoding(res: dict) -> list[str]:
    out = []
    for run in res["runs"]:
        s = run["shape"]
        out += ["", f"Batch {s['batch']} x {s['seq']} tokens, width {s['dim']}, {s['dtype']}, {_rounds_enc(run)}:", "",
                "| variant | median ms | paired ratio vs lookup | 95% interval | rounds |", "|---|---:|---:|---|---:|"]
        for name, sec in run["seconds"].items():
            f = run["paired"].get(name)
            if f is None:
                out.append(f"| {name} | {sec * 1e3:.3f} | 1.00 | | |")
            else:
                iv = _iv(f["interval"], f["rounds"])
                out.append(f"| {name} | {sec * 1e3:.3f} | {f['paired_ratio']:.2f} | {iv} | {f['rounds']} |")
    acc = res.get("sinusoid_accuracy")
    if acc:
        out += ["", f"Exact sinusoid in float32 against the float64 formula, width {acc['dim']}, {acc['positions']} "
                f"positions up to {acc['max_position']:,}: largest error {acc['max_abs_error']:.2e}."]
    return out


def _rounds_enc(run: dict) -> str:
    return (f"{run['rounds']} paired rounds against the lookup (at least {run['repeats']}; stopped: "
            f"{run['stopped']}{_decided(run)})")


def _models(res: dict) -> list[str]:
    out = []
    for family, r in res["models"].items():
        out += ["", f"**{family}** ({_cfg(r['config'])}), batch {res['batch']} x {res['tokens']} tokens.", "",
                f"Forward (no grad), {_rounds(r['forward'])}:", ""]
        out += _timing_table(r["forward"], "seconds")
        out += ["", f"Training step (forward with LM loss + backward), {_rounds(r['train_step'])}:", ""]
        out += _timing_table(r["train_step"], "seconds")
    return out


def _decode(res: dict) -> list[str]:
    out = []
    new = res["new_tokens"]
    for family, r in res["models"].items():
        st = r["stock"]
        out += ["", f"**{family}**: greedy `generate()`, KV cache, prompt {res['prompt_tokens']} tokens, {new} new "
                f"tokens, batch {res['batch']}, {_rounds(r)}.", "",
                "| encoding | tokens/s | per-token ms | per-token paired ratio | 95% interval | rounds "
                "| generate paired ratio |",
                "|---|---:|---:|---:|---|---:|---:|",
                f"| stock | {new / st['generate_s']:.1f} | {st['per_token_s'] * 1e3:.2f} | | | | |"]
        for label, figs in r["variants"].items():
            g, p = figs["generate_s"], figs["per_token_s"]
            out.append(f"| {label} | {new / g['median']:.1f} | {p['median'] * 1e3:.2f} | {p['paired_ratio']:.3f} | "
                       f"{_iv(p['interval'], p['rounds'])} | {p['rounds']} | {g['paired_ratio']:.3f} |")
    return out


def _memory_rows(stock: dict, rows: dict) -> list[str]:
    out = ["| encoding | step peak MiB | total peak MiB | step ratio | total ratio |", "|---|---:|---:|---:|---:|",
           f"| stock | {_mb(stock['step_peak_bytes'])} | {_mb(stock['total_peak_bytes'])} | | |"]
    for label, m in rows.items():
        out.append(f"| {label} | {_mb(m['step_peak_bytes'])} | {_mb(m['total_peak_bytes'])} | "
                   f"{m['step_ratio']:.3f} | {m['total_ratio']:.3f} |")
    return out


def _memory(res: dict) -> list[str]:
    out = []
    for family, r in res["models"].items():
        out += ["", f"**{family}**: training step (forward with LM loss + backward), batch {res['batch']} x "
                f"{res['tokens']} tokens. Step peak: allocated during the step; total: plus weights. "
                f"Method: {res['method']}.", ""]
        out += _memory_rows(r["stock"], r["variants"])
    return out


def _alibi(res: dict) -> list[str]:
    out = ["", f"{_cfg(res['config'])}, batch {res['batch']} x {res['tokens']} tokens; stock: RoPE + causal SDPA.",
           "", f"Forward time, {_rounds(res['forward'])}:", ""]
    out += _timing_table(res["forward"], "seconds")
    for what, rows in res["memory"].items():
        out += ["", f"Peak memory, {what.replace('_', ' ')} ({res['memory_method']}):", ""]
        out += _memory_rows(rows["stock"], rows["variants"])
    return out


def _remap(res: dict) -> list[str]:
    limits, verdicts = res["limits"], res["verdicts"]
    out = ["", f"{_cfg(res['config'])} (trained length {res['trained_length']}), batch {res['batch']} x "
               f"{res['tokens']} tokens then {res['new_tokens']} decoded with the KV cache, each remap at its "
               "defaults; stock: RoPE + causal SDPA.",
           "", f"Prefill and decoding per token (one generate() per measurement), {_rounds(res['read'])}; limits: "
               f"prefill {limits['prefill_s']}x, decoding {limits['per_token_s']}x:", ""]
    read = res["read"]
    out += ["| encoding | prefill s | paired ratio | 95% interval | verdict | decode ms/token | paired ratio "
            "| 95% interval | verdict |", "|---|---:|---:|---|---|---:|---:|---|---|",
            f"| stock | {read['stock']['prefill_s']:.2f} | | | | {read['stock']['per_token_s'] * 1e3:.1f} | | | |"]
    for label, figs in read["variants"].items():
        p, d = figs["prefill_s"], figs["per_token_s"]
        out.append(f"| {label} | {p['median']:.2f} | {p['paired_ratio']:.3f} | {_iv(p['interval'], p['rounds'])} | "
                   f"{_VERDICT[verdicts[label]['prefill_s']]} | {d['median'] * 1e3:.1f} | {d['paired_ratio']:.3f} | "
                   f"{_iv(d['interval'], d['rounds'])} | {_VERDICT[verdicts[label]['per_token_s']]} |")
    out += ["", f"Peak memory of the prefill ({res['memory_method']}); limit {limits['memory']}x on the step peak:", ""]
    out += _memory_rows(res["memory"]["prefill"]["stock"], res["memory"]["prefill"]["variants"])
    return out


_SECTIONS = {
    "encoding": ("Encoding only: trajectory positions + encoding against a table lookup", _encoding),
    "models": ("Forward and training step, patched against stock", _models),
    "decode": ("Greedy decoding with the KV cache", _decode),
    "memory": ("Peak memory of a training step", _memory),
    "alibi": ("ALiBi at long context against stock SDPA", _alibi),
    "remap": ("Remapped relative positions past the trained length against stock SDPA", _remap),
}


def to_markdown(result: dict) -> str:
    lines = ["# hf-trajpe bench", "", "Every figure is a ratio measured side by side in this run; time ratios are "
             "the median of paired per-round ratios with a 95% bootstrap interval (see docs/benchmarks.md for how "
             "to read them).", "", "## Machine", ""]
    lines += _meta(result["meta"])
    if result.get("targets"):
        lines += ["", "## Targets", ""] + _targets(result["targets"])
    for key, (title, fn) in _SECTIONS.items():
        if key in result:
            lines += ["", f"## {title}", ""] + [f"Wall time of this benchmark: {result[key]['wall_s']:.0f} s."]
            lines += fn(result[key])
    return "\n".join(lines) + "\n"
