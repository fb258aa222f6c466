"""``hf-trajpe bench``: benchmarks that report ratios measured side by side in one run."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _args

NAME = "bench"
HELP = ("benchmarks, patched against stock, every figure a ratio measured side by side: "
        "encoding, models, decode, memory, alibi, remap, all")
_WHAT = ("encoding", "models", "decode", "memory", "alibi", "remap", "all")


def _seconds(text: str) -> float:
    """A time budget: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text}: the budget must be a finite number of seconds > 0")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=_WHAT,
                   help="encoding: trajectory positions + encoding vs a table lookup; models: forward and "
                        "training step per encoding; decode: greedy generate() with the KV cache; memory: peak "
                        "memory of a training step; alibi: ALiBi at 4,096 tokens vs stock SDPA; remap: Self-Extend, "
                        "ReRoPE, DCA and STRING reading 16,384 tokens (four times the trained length) and decoding "
                        "vs stock SDPA; all: everything")
    p.add_argument("--size", default="default", choices=("tiny", "default"),
                   help="default: the full shapes (GPT-2 small, a 4-layer Llama, 512 tokens; docs/benchmarks.md); "
                        "tiny: a few seconds, for the smoke test (default: %(default)s)")
    p.add_argument("--models", nargs="+", default=["gpt2", "llama"], choices=("gpt2", "llama"),
                   help="models for models/decode/memory (default: both)")
    p.add_argument("--repeats", type=_args.int_at_least(1, "--repeats"), default=None,
                   help="paired rounds at least, >= 1 (6 or more for a met/missed verdict); default: per benchmark "
                        "and size (6, 10 for encoding)")
    p.add_argument("--max-repeats", type=_args.int_at_least(1, "--max-repeats"), default=None,
                   help="paired rounds at most: rounds are added two at a time while a 95%% interval is wider than "
                        "+-2%% (default: per benchmark and size, 30 for models and decode; equal to --repeats "
                        "turns the adaptive rounds off)")
    p.add_argument("--budget", type=_seconds, default=None,
                   help="seconds of paired rounds per measured figure set (one model's forward, its training "
                        "step, ...) after which no rounds are added (default: per benchmark, 90 s; 20 s per "
                        "encoding shape)")
    p.add_argument("--decide-budget", type=_seconds, default=None,
                   help="seconds of further rounds per measured figure set for targets still unresolved although "
                        "their paired ratio is more than 2%% from the limit: pairs of rounds are added for those "
                        "until their 95%% interval decides (default: per benchmark, 600 s for models, 300 s for "
                        "decode, 60 s per encoding shape)")
    p.add_argument("--decide-max-repeats", type=_args.int_at_least(1, "--decide-max-repeats"), default=None,
                   help="paired rounds at most for those targets, all rounds counted (default: 60 for models and "
                        "decode, 120 for encoding)")
    p.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                   help="wall: elapsed time; cpu: the process's CPU time, on --device cpu only, which other jobs "
                        "on a shared machine disturb far less (default: %(default)s)")
    p.add_argument("--device", type=_args.device, default="cpu", help="cpu or cuda[:N] (default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--threads", type=_args.int_at_least(1, "the number of threads"), default=None,
                   help="torch threads, >= 1 (default: torch's choice)")
    p.add_argument("--out", type=_args.output_dir, default=None,
                   help="folder for bench.json and bench.md, created when they are written")
    enc = p.add_argument_group("encoding only (override the size)")
    enc.add_argument("--batch", type=_args.int_at_least(1, "the batch size"), default=None)
    enc.add_argument("--seq", type=_args.int_at_least(1, "a sequence length"), nargs="+", default=None,
                     help="sequence length(s)")
    enc.add_argument("--dim", type=_args.even_int, default=None, help="encoding width (even)")


def check(args: argparse.Namespace) -> None:
    given = [f"--{k}" for k in ("batch", "seq", "dim") if getattr(args, k) is not None]
    if given and args.what not in ("encoding", "all"):
        one = len(given) == 1
        raise ValueError(f"{', '.join(given)} {'sets' if one else 'set'} the shapes of `bench encoding` (and `all`) "
                         f"only, not `bench {args.what}`; drop {'it' if one else 'them'} or run "
                         "`hf-trajpe bench encoding`")


def run(args: argparse.Namespace) -> int:
    import torch

    from ..paths import writable_dir

    if args.out:
        writable_dir(args.out, "--out")  # before any measurement: the results must have somewhere to go
    if args.repeats is not None and args.repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {args.repeats}")
    if args.max_repeats is not None and args.repeats is not None and args.max_repeats < args.repeats:
        raise ValueError(f"--max-repeats {args.max_repeats} is below --repeats {args.repeats}; give at least as many")
    device = args.device
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f"--device {device!r} is not a torch device; use cpu or cuda[:N]") from None
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"--device {device}: the benchmarks run on cpu or cuda[:N] only")
    if args.clock == "cpu" and kind != "cpu":
        raise ValueError(f"--clock cpu times this process's CPU work and would miss the GPU kernels on --device "
                         f"{device}; use --clock wall (the default) there")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this torch build sees no CUDA device; use --device cpu")
    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return _run(args, device)
    finally:
        torch.set_num_threads(threads)  # in-process callers (tests) keep their setting


def _run(args: argparse.Namespace, device: str) -> int:
    import dataclasses
    import json

    from ..benchmarks.report import to_markdown
    from ..benchmarks.setup import SIZES, parse_dtype
    from ..benchmarks.suite import BENCHMARKS, run_benchmarks

    size = SIZES[args.size]
    overrides = {k: v for k, v in (("encoding_batch", args.batch), ("encoding_dim", args.dim),
                                   ("encoding_seqs", tuple(args.seq) if args.seq else None)) if v}
    if overrides:
        size = dataclasses.replace(size, **overrides)
    which = BENCHMARKS if args.what == "all" else (args.what,)
    result = run_benchmarks(size, which, tuple(args.models), device, parse_dtype(args.dtype), args.repeats,
                            progress=lambda msg: print(msg, flush=True), max_rounds=args.max_repeats,
                            budget_s=args.budget, decide_budget_s=args.decide_budget,
                            decide_max_rounds=args.decide_max_repeats, clock=args.clock)
    md = to_markdown(result)
    print()
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "bench.md").write_text(md)
        print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    return 0
