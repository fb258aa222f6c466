"""The screening table of docs/results/ruler/smollm2_order (part 1 of its plan) from a RULER rows file: per task the
stock model's mean score at each length with its prompt count, CPU seconds per prompt, and the decoding tokens the
answer-stop saved; works on an unfinished rows file (the run's own report comes when it ends).

    python scripts/ruler_screen_summary.py docs/results/ruler/smollm2_order/screen/ruler_rows.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

TASKS = ("niah_multikey_1", "niah_multikey_2", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")
LENGTHS = (4096, 8192)


def table(rows: list[dict]) -> str:
    score, cpu, gen, budget = (collections.defaultdict(list) for _ in range(4))
    for r in rows:
        key = (r["task"], r["length"])
        score[key].append(r["score"])
        cpu[key].append(r["cpu_seconds"])
        gen[key].append(r.get("generated_tokens", r["max_new_tokens"]))
        budget[key].append(r["max_new_tokens"])
    out = ["| task | " + " | ".join(f"{n:,}: mean (prompts)" for n in LENGTHS) + " | CPU s per prompt, "
           + " / ".join(f"{n // 1024}k" for n in LENGTHS) + " | tokens generated of the budget |",
           "|---|" + "---:|" * len(LENGTHS) + "---:|---:|"]
    for task in TASKS:
        means = [f"{sum(score[(task, n)]) / len(score[(task, n)]):.2f} ({len(score[(task, n)])})"
                 if (task, n) in score else "-" for n in LENGTHS]
        costs = " / ".join(f"{sum(cpu[(task, n)]) / len(cpu[(task, n)]):.0f}" if (task, n) in cpu else "-"
                           for n in LENGTHS)
        made = sum(sum(gen[(task, n)]) for n in LENGTHS if (task, n) in gen)
        allowed = sum(sum(budget[(task, n)]) for n in LENGTHS if (task, n) in budget)
        out.append(f"| {task} | " + " | ".join(means) + f" | {costs} | " + (f"{made:,} of {allowed:,}" if allowed
                                                                             else "-") + " |")
    made = sum(sum(v) for v in gen.values())
    allowed = sum(sum(v) for v in budget.values())
    share = f" ({1 - made / allowed:.0%} saved by stopping at the answer)" if allowed else ""
    return "\n".join(out) + f"\n\n{len(rows)} prompts; {made:,} tokens generated of a budget of {allowed:,}{share}."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", type=Path, help="the RULER rows file (ruler_rows.jsonl)")
    args = p.parse_args(argv)
    lines = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    print(table([r for r in lines if "header" not in r]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
