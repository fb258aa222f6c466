"""The RULER options of ``hf-trajpe eval --long-context LENGTH --ruler`` (docs/evaluation.md, "RULER").

Kept apart from :mod:`.eval` so that the command gains a group of options and one branch. Argument types
are light (standard library); task and haystack names are checked against their registries before any
model is loaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _args

__all__ = ["add_ruler_arguments", "check_ruler", "run_ruler_command"]

SAMPLES, QUICK_SAMPLES = 5, 2
#: under --out: each row as it is scored; a rerun with the same --out continues from it
ROWS_FILE = "ruler_rows.jsonl"


def add_ruler_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("RULER (--long-context LENGTH --ruler)")
    g.add_argument("--ruler", action="store_true",
                   help="instead of perplexity and passkeys: RULER's synthetic tasks (needle in a haystack, "
                        "variable tracking, common and frequent words), made offline with the model's tokenizer")
    g.add_argument("--ruler-lengths", type=_args.int_at_least(64, "a RULER length"), nargs="+", default=None,
                   metavar="TOKENS", help="prompt lengths in tokens (default: the --long-context LENGTH)")
    g.add_argument("--tasks", nargs="+", default=None, metavar="TASK",
                   help="RULER tasks (default: all: niah_single_1/2/3, niah_multikey_1/2/3, niah_multivalue, "
                        "niah_multiquery, vt, cwe, fwe)")
    g.add_argument("--haystacks", nargs="+", default=None, metavar="HAYSTACK",
                   help="haystacks: noise, needles, a content type, real_code, real_prose, real_license, "
                        "real_man (default: each task's own, as in RULER)")
    g.add_argument("--samples", type=_args.int_at_least(1, "the number of samples"), default=None,
                   help=f"prompts per task, haystack and length (default: {SAMPLES}; --quick: {QUICK_SAMPLES})")
    g.add_argument("--quick", action="store_true",
                   help=f"a small run: niah_single_1, niah_multikey_1, vt, cwe and fwe on the noise haystack, "
                        f"{QUICK_SAMPLES} samples (options given explicitly still apply)")
    g.add_argument("--effective-ratio", type=float, default=0.85, metavar="RATIO",
                   help="effective length: the longest length scoring at least RATIO x the baseline's score at "
                        "--reference-length (default: %(default)s)")
    g.add_argument("--reference-length", type=_args.int_at_least(64, "the reference length"), default=None,
                   metavar="TOKENS", help="a length inside the model's window (default: the shortest length)")


def check_ruler(args: argparse.Namespace) -> None:
    given = [f"--{n.replace('_', '-')}" for n in ("ruler_lengths", "tasks", "haystacks", "samples", "quick",
                                                                 "reference_length")
             if getattr(args, n) not in (None, False)]
    if given and not args.ruler:
        raise ValueError(f"{', '.join(given)} apply to the RULER suite; add --ruler (with --long-context LENGTH)")
    if args.ruler and args.long_context is None:
        raise ValueError("--ruler runs with --long-context LENGTH (its default prompt length); add it")
    if not 0.0 < args.effective_ratio <= 1.0:
        raise ValueError(f"--effective-ratio must be in (0, 1], got {args.effective_ratio}")
    lengths = args.ruler_lengths or ([args.long_context] if args.long_context else [])
    if args.reference_length is not None and args.reference_length not in lengths:
        raise ValueError(f"--reference-length {args.reference_length} is not among the RULER lengths {lengths}; "
                         "give one of them")


def _names(given: list[str] | None, known: list[str], what: str) -> None:
    unknown = [n for n in given or [] if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")


def run_ruler_command(args: argparse.Namespace, models: dict[str, str], patches: dict[str, dict]) -> int:
    from ..evaluation.ruler import haystack_names, task_names
    from ..evaluation.ruler.methods import evaluate_ruler
    from ..evaluation.ruler.processes import launched
    from ..evaluation.ruler.report import write_ruler_report
    from ..evaluation.ruler.runner import QUICK

    _names(args.tasks, task_names(), "RULER task(s)")
    _names(args.haystacks, haystack_names(), "haystack(s)")
    tasks, haystacks, samples = args.tasks, args.haystacks, args.samples or SAMPLES
    if args.quick:
        tasks, haystacks = tasks or QUICK["tasks"], haystacks or QUICK["haystacks"]
        samples = args.samples or QUICK_SAMPLES
    baseline = args.baseline or next(iter(models))
    processes = launched()
    table = evaluate_ruler(models, patches, tokenizer=args.tokenizer, tasks=tasks,
                           lengths=args.ruler_lengths or [args.long_context], samples=samples, haystacks=haystacks,
                           seed=args.data_seed, progress=not args.no_progress, dtype=args.dtype,
                           rows_file=Path(args.out) / ROWS_FILE, processes=processes)
    if not processes.main:  # spread over processes (accelerate launch): the main one reports, once
        return 0
    paths = write_ruler_report(table, args.out, baseline=baseline, reference_length=args.reference_length,
                               ratio=args.effective_ratio, n_resamples=args.bootstrap)
    print(paths["md"].read_text())
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0
