"""Size and build time of each content type's dataset at the default size (docs/data.md).

    python scripts/data_sizes.py                 # default sizes, seed 0; prints a Markdown table
    python scripts/data_sizes.py --json out.json

Tokens are byte-level tokens (hf_trajpe.data.byte_tokenizer: one token per UTF-8 byte), plus one
separator per document. Build time is wall-clock of ``build_dataset`` (generation + Arrow tables).
"""

from __future__ import annotations

import argparse
import json
import time

from hf_trajpe.data import DEFAULT_MIN_CHARS, DEFAULT_SIZES, build_dataset, dataset_stats
from hf_trajpe.data.registry import names


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures as JSON")
    args = p.parse_args()
    build_dataset("random_content", train=1, validation=1, test=1)  # warm-up: import datasets once
    rows = {}
    for name in names():
        t0 = time.perf_counter()
        dd = build_dataset(name, seed=args.seed, **DEFAULT_SIZES)
        seconds = time.perf_counter() - t0
        stats = dataset_stats(dd)
        rows[name] = {"seconds": round(seconds, 2), **stats,
                      "examples": sum(s["examples"] for s in stats.values()),
                      "bytes": sum(s["bytes"] for s in stats.values())}
    sizes = "/".join(str(DEFAULT_SIZES[s]) for s in ("train", "validation", "test"))
    print(f"Default size: train/validation/test = {sizes} examples, min_chars = {DEFAULT_MIN_CHARS}, "
          f"seed {args.seed}\n")
    print("| content type | examples | byte tokens (MB) | mean bytes / example | train tokens | build time (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['examples']} | {r['bytes'] / 1e6:.2f} | {r['bytes'] / r['examples']:.0f} | "
              f"{r['train']['bytes'] + r['train']['examples']:,} | {r['seconds']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
