"""Accuracy of the content-type detector (``strength="auto"``) on the content-type datasets.

    python3 scripts/detector_accuracy.py [--test 100] [--seed 0] [--chars 768]

Prints the confusion table (rows: true type, columns: detected) as Markdown; docs/encodings.md
holds its output. The detector sees the first ``--chars`` characters of each test example, about
one training block of byte tokens.
"""

from __future__ import annotations

import argparse
from collections import Counter

from hf_trajpe import CONTENT_TYPES, detect_content_type
from hf_trajpe.data import build_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chars", type=int, default=768)
    args = ap.parse_args()
    labels = list(CONTENT_TYPES) + ["unknown"]
    rows, correct, total = {}, 0, 0
    for kind in CONTENT_TYPES:
        texts = build_dataset(kind, train=0, validation=0, test=args.test, seed=args.seed)["test"]["text"]
        counts = Counter(detect_content_type(t[: args.chars]) for t in texts)
        rows[kind] = counts
        correct += counts[kind]
        total += len(texts)
    short = {k: k.split("_")[0][:6] for k in labels}
    print(f"detector accuracy: {correct}/{total} = {correct / total:.1%} "
          f"(test split, seed {args.seed}, first {args.chars} characters)\n")
    print("| true \\ detected | " + " | ".join(short[k] for k in labels) + " | accuracy |")
    print("|---|" + "---:|" * (len(labels) + 1))
    for kind, counts in rows.items():
        n = sum(counts.values())
        print(f"| {kind} | " + " | ".join(str(counts[k]) for k in labels) + f" | {counts[kind] / n:.0%} |")


if __name__ == "__main__":
    main()
