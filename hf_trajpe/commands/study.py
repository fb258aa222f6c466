"""``hf-trajpe study``: run a study YAML through the study engine: the content study (small models per
encoding from scratch, per content type, the strength sweep), the task study (known answers), the extension
study (context-extension methods past the trained length); see docs/study.md.

    hf-trajpe study --config configs/study/default.yaml            # about an hour on 2 CPU cores
    hf-trajpe study --config configs/study/default.yaml --quick    # the same pipeline in a few minutes
    hf-trajpe study --config configs/study/default.yaml train.steps=300 report_dir=outputs/s300
    hf-trajpe study --quick --config configs/study/tasks.yaml --config configs/study/default.yaml   # make run
    hf-trajpe study --config configs/study/extension.yaml --quick   # context extension, in under a minute

Several ``--config`` run one after the other and end with every study's first screen, in that order.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from . import _args

NAME = "study"
HELP = "the study: train per encoding, evaluate per content type and length, strength sweep, report"


class _Configs(argparse.Action):
    """``--config`` given once or more: a list replacing the default (checked like any ``--config``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, "_configs_given", False)
        setattr(namespace, self.dest, (list(getattr(namespace, self.dest)) if given else []) + [values])
        namespace._configs_given = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=_args.existing_file, action=_Configs, default="configs/study/default.yaml",
                   help="study YAML (default: %(default)s); give it again to run several studies in order, "
                        "ending with every one's summary")
    p.add_argument("--quick", action="store_true", help="apply each config's `quick:` profile (minutes)")
    p.add_argument("overrides", type=_args.key_value, nargs="*", metavar="key=value",
                   help="dotted overrides, e.g. train.steps=300 seeds=[0,1] report_dir=outputs/x")
    p.add_argument("--no-progress", action="store_true", help="no progress bar during evaluation")


def run(args: argparse.Namespace) -> int:
    from ..study import load_study_config, run_study
    from ..study.screen import first_screen

    configs = args.config if isinstance(args.config, list) else [args.config]
    if len(configs) > 1 and args.overrides:
        print("hf-trajpe study: error: key=value overrides apply to one study; give one --config with them, or "
              "write the changes into each study's YAML", file=sys.stderr)
        return 2
    cfgs = [load_study_config(c, quick=args.quick, overrides=args.overrides) for c in configs]  # all checked first
    shown = []
    for path, cfg in zip(configs, cfgs, strict=True):
        command = "hf-trajpe study --config " + shlex.quote(path) + (" --quick" if args.quick else "") + (
            " " + " ".join(shlex.quote(o) for o in args.overrides) if args.overrides else "")
        try:
            paths = run_study(cfg, command=command, progress=not args.no_progress, summary=len(configs) == 1)
        except FileExistsError as err:
            print(f"hf-trajpe study: error: {err}", file=sys.stderr)
            return 2
        folders = sorted({str(Path(p).parent) for p in paths.values()})
        shown.append(paths["study_md"])
        print(f"the whole study: {paths['study_md']} (every file it wrote is in {', '.join(folders)})", flush=True)
    if len(configs) > 1:  # the results, last on the screen
        print("\n" + "\n".join(first_screen(Path(p).read_text()) for p in shown), flush=True)
    return 0
