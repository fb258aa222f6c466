"""Wall time and training throughput of the tiny fine-tuning config, one run per encoding.

    python3 scripts/finetune_times.py                       # this machine, accelerate's cpu.yaml, 200 steps
    python3 scripts/finetune_times.py --accelerate-config configs/accelerate/gpu.yaml   # one GPU, bf16 (auto)

Each run is `accelerate launch --config_file <cfg> recipes/finetune.py --config configs/experiments/tiny_<enc>.yaml`
in a fresh process, into `<out>/<enc>`. Prints a Markdown table: wall time of the whole launch (start-up, data,
training, evaluation, checkpoints, final save), training time only, training tokens/s (tokens of all processes
over training time), final training loss and mean validation loss over the seven types.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENCODINGS = ("native", "sinusoidal", "rope", "alibi", "none", "trajectory")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", nargs="+", default=list(ENCODINGS), choices=ENCODINGS)
    p.add_argument("--accelerate-config", default="configs/accelerate/cpu.yaml")
    p.add_argument("--out", default="runs/finetune_times")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="passed to the recipe, e.g. train.max_steps=50")
    args = p.parse_args()

    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    rows = []
    for enc in args.encodings:
        out = ROOT / args.out / enc
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", args.accelerate_config,
               "recipes/finetune.py", "--config", f"configs/experiments/tiny_{enc}.yaml", f"output_dir={out}",
               "logging.progress=false", *args.overrides]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"{enc}: the recipe failed ({proc.returncode})")
        summary = json.loads((out / "ranks" / "rank_0.json").read_text())
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        tokens = max(r["train/tokens"] for r in records if "train/tokens" in r)
        evals = [r for r in records if "eval/mean_loss" in r]
        last = summary["losses"][str(summary["step"])]
        mp = next((line for line in proc.stdout.splitlines() if "mixed precision" in line), "")
        rows.append((enc, wall, summary["train_seconds"], tokens / summary["train_seconds"], last,
                     evals[-1]["eval/mean_loss"] if evals else float("nan"), summary["step"], mp))
        print(f"{enc}: {wall:.1f} s", file=sys.stderr, flush=True)
    print(f"\n`{' '.join(['accelerate launch --config_file', args.accelerate_config])} ...` "
          f"({rows[0][6]} steps; {rows[0][7].split('(')[-1].rstrip(')')})\n")
    print("| encoding | wall time (s) | training time (s) | training tokens/s | final train loss | mean val loss |")
    print("|---|---:|---:|---:|---:|---:|")
    for enc, wall, train, tps, last, val, _, _ in rows:
        print(f"| {enc} | {wall:.1f} | {train:.1f} | {tps:,.0f} | {last:.3f} | {val:.3f} |")


if __name__ == "__main__":
    main()
