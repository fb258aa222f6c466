"""The ``hf-trajpe`` command line: one sub-command per module in ``hf_trajpe.commands``.

Each command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``, and
may define ``check(args)``, which raises ``ValueError`` for argument combinations that argparse cannot
check one value at a time. Parsing, ``--help`` and argument errors import no heavy library (torch,
transformers, datasets, matplotlib): command modules import them inside ``run``, and the argument types
(``hf_trajpe.commands._args``) are standard library only. So ``hf-trajpe --help`` answers at once, and
a wrong argument exits with status 2 before any model is loaded or any output folder is created.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from . import commands

__all__ = ["build_parser", "main"]


def _command_modules() -> list:
    mods = [importlib.import_module(f"{commands.__name__}.{m.name}")
            for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    return sorted((m for m in mods if hasattr(m, "NAME")), key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-trajpe",
        description="Swap, fine-tune and measure positional encodings of Hugging Face transformers models. "
        "Fine-tuning runs through `accelerate launch recipes/finetune.py` (see README).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules():
        doc = (mod.__doc__ or "").split("\n\n", 1)
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP,
                           epilog=_examples(doc[1]) if len(doc) > 1 else None,
                           formatter_class=_Formatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _check=getattr(mod, "check", None), _parser=p)
    return parser


class _Formatter(argparse.HelpFormatter):
    """Wraps the description as usual; keeps the examples epilog as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _examples(text: str) -> str | None:
    """The indented example lines of a command module's docstring, as the epilog of its help."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("    hf-trajpe") or (lines and line.startswith("    ")):
            lines.append(line)
        elif lines:
            break
    return "examples:\n" + "\n".join(lines) if lines else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hf-trajpe`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    0 after ``--help``; 2 for a wrong argument (reported by argparse with the command's usage) or a
    ``ValueError``, ``OSError`` (a file or folder that is missing or unreadable, such as a model folder without
    weights) or missing package raised by the command: one line, no traceback.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "_run", None):
            parser.print_help()
            return 2
        if args._check is not None:
            try:
                args._check(args)
            except ValueError as err:
                args._parser.error(str(err))
    except SystemExit as done:  # argparse exits after --help and on errors; callers get the status
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 2
    from .loading import MissingPackageError  # standard library only

    try:
        return int(args._run(args) or 0)
    except (ValueError, OSError, MissingPackageError) as err:  # (OSError: a file or folder, which it names)
        print(f"hf-trajpe {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
