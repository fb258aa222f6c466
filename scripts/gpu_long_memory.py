"""Peak GPU memory of a bf16 training step at 8k and 32k tokens, ALiBi (float mask and flex) and trajectory
against stock, on the benchmark's tiny and default Llama; writes long_memory.json and long_memory.md.

    python scripts/gpu_long_memory.py --out docs/results/bench/gpu
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from hf_trajpe.benchmarks.long_memory import long_training_peaks
from hf_trajpe.benchmarks.machine import machine_info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for long_memory.json and long_memory.md")
    p.add_argument("--tokens", type=int, nargs="+", default=[8192, 32768])
    p.add_argument("--sizes", nargs="+", default=["tiny", "default"], choices=("tiny", "default"))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU: peak memory is read from torch.cuda's allocator", file=sys.stderr)
        return 2
    rows = [r for size in args.sizes for r in long_training_peaks(size, args.tokens)]
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"meta": machine_info("cuda", torch.bfloat16), "rows": rows}
    (args.out / "long_memory.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Peak memory of a bf16 training step at long lengths (GPU)", "",
             f"{result['meta'].get('gpu')}, torch {torch.__version__}; stock: the same Llama on SDPA's causal "
             "kernel.",
             "", "| model | tokens | variant | stock peak (MiB) | peak (MiB) | ratio |",
             "|---|---:|---|---:|---:|---:|"]
    lines += [f"| {r['size']} | {r['tokens']} | {r['variant']} | {r['stock_bytes'] / 2**20:,.0f} | "
              f"{r['peak_bytes'] / 2**20:,.0f} | {r['ratio']:.3f} |" for r in rows]
    (args.out / "long_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
