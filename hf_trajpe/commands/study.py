"""``hf-trajpe study``: train small models per encoding from scratch, evaluate per content type, sweep
the trajectory strength, write the report (see docs/study.md).

    hf-trajpe study --config configs/study/default.yaml            # about 45 min on 2 CPU cores
    hf-trajpe study --config configs/study/default.yaml --quick    # the same pipeline in a few minutes
    hf-trajpe study --config configs/study/default.yaml train.steps=300 report_dir=outputs/s300
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from . import _args

NAME = "study"
HELP = "the study: train per encoding, evaluate per content type and length, strength sweep, report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=_args.existing_file, default="configs/study/default.yaml",
                   help="study YAML (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="apply the config's `quick:` profile (minutes, one seed)")
    p.add_argument("overrides", type=_args.key_value, nargs="*", metavar="key=value",
                   help="dotted overrides, e.g. train.steps=300 seeds=[0,1] report_dir=outputs/x")
    p.add_argument("--no-progress", action="store_true", help="no progress bar during evaluation")


def run(args: argparse.Namespace) -> int:
    from ..study import load_study_config, run_study

    cfg = load_study_config(args.config, quick=args.quick, overrides=args.overrides)
    command = "hf-trajpe study " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1 else None
    if not command or "study" not in (sys.argv[1:2] or [""]):
        command = "hf-trajpe study --config " + shlex.quote(args.config) + (" --quick" if args.quick else "") + (
            " " + " ".join(shlex.quote(o) for o in args.overrides) if args.overrides else "")
    try:
        paths = run_study(cfg, command=command, progress=not args.no_progress)
    except FileExistsError as err:
        print(f"hf-trajpe study: error: {err}", file=sys.stderr)
        return 2
    folders = sorted({str(Path(p).parent) for p in paths.values()})
    print(f"the whole study: {paths['study_md']} (every file it wrote is in {', '.join(folders)})")
    return 0
