"""``hf-trajpe bench``: benchmarks that print ratios measured side by side in one run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NAME = "bench"
HELP = "benchmarks (ratios measured side by side): encoding"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["encoding"], help="which benchmark")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, nargs="+", default=[2048], help="sequence length(s)")
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds; medians are reported")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None, help="write JSON here as well")


def run(args: argparse.Namespace) -> int:
    import torch

    from ..benchmarks.encoding import bench_encoding

    results = []
    for seq in args.seq:
        r = bench_encoding(args.batch, seq, args.dim, args.repeats, args.device)
        results.append(r)
        shape = r["shape"]
        print(f"\nencoding benchmark: batch {shape['batch']} x {shape['seq']} tokens, width {shape['dim']}, "
              f"{shape['device']}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
              f"median of {r['repeats']} interleaved rounds")
        print("| variant | median ms | ratio vs lookup |\n|---|---:|---:|")
        for name, sec in r["seconds"].items():
            print(f"| {name} | {sec * 1e3:.2f} | {r['ratio_vs_lookup'][name]:.2f} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0
