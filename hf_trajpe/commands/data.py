"""``hf-trajpe data``: build the content-type datasets (docs/spec.md, section 3) and save them to disk.

    hf-trajpe data build --out data/content_types            # all seven, default sizes
    hf-trajpe data build --out DIR --train 500 --types code_hierarchy dialogue_structure
    hf-trajpe data show dialogue_structure                   # print one test example
"""

from __future__ import annotations

import argparse

from . import _args

NAME = "data"
HELP = "build the content-type datasets (datasets.DatasetDict per type) and save them, or show an example"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..data.build import DEFAULT_MIN_CHARS, DEFAULT_SIZES  # light: no datasets import

    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="build and save_to_disk each content type under --out/<type>",
                       description="Build the content-type datasets and save_to_disk each under --out/<type>.")
    b.add_argument("--out", type=_args.output_dir, required=True, help="output folder")
    for split in ("train", "validation", "test"):
        b.add_argument(f"--{split}", type=_args.int_at_least(0, f"the {split} size"), default=DEFAULT_SIZES[split],
                       help=f"examples in the {split} split, >= 0 (default: %(default)s)")
    b.add_argument("--seed", type=int, default=0, help="data seed (default: %(default)s)")
    b.add_argument("--min-chars", type=_args.int_at_least(1, "the minimum length"), default=DEFAULT_MIN_CHARS,
                   help="minimum characters per example, >= 1 (default: %(default)s)")
    b.add_argument("--types", type=_args.content_type, nargs="+", default=None,
                   help="content types (default: all seven)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    s = sub.add_parser("show", help="print examples of one content type",
                       description="Print test examples of one content type (generated, nothing is saved).")
    s.add_argument("type", type=_args.content_type, help="content type name")
    s.add_argument("-n", type=_args.int_at_least(1, "the number of examples"), default=1,
                   help="number of examples (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from ..data import build_dataset, save_all
    from ..data.registry import get

    if args.data_command == "show":
        get(args.type)  # unknown names raise ValueError
        dd = build_dataset(args.type, train=0, validation=0, test=args.n, seed=args.seed)
        for row in dd["test"]:
            print(f"--- {row['source']}\n{row['text']}\n")
        return 0
    if args.types:
        for name in args.types:
            get(name)
    manifest = save_all(args.out, names=args.types,
                        sizes={"train": args.train, "validation": args.validation, "test": args.test},
                        seed=args.seed, min_chars=args.min_chars, progress=not args.no_progress)
    print(f"{'content type':<22} {'examples':>9} {'MB':>7} {'seconds':>8}")
    for name, info in manifest["types"].items():
        n = sum(s["examples"] for s in info["splits"].values())
        mb = sum(s["bytes"] for s in info["splits"].values()) / 1e6
        print(f"{name:<22} {n:>9} {mb:>7.2f} {info['build_seconds']:>8.2f}")
    print(f"wrote {args.out}/<type> (datasets.load_from_disk) and {args.out}/manifest.json")
    return 0
