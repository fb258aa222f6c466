"""Argument types of the sub-commands: they check a value while argparse parses it, so a wrong value
is reported (exit status 2, with what to do) before any model is loaded or any folder is created.

Import-light on purpose (standard library only; ``hf_trajpe.data`` is imported for content-type names
and is light too): ``hf-trajpe ... --help`` and argument errors never import torch or transformers.
The trajectory options are checked by the library's own torch-free checks (``hf_trajpe.checks``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

__all__ = ["device", "even_int", "existing_dir", "existing_file", "finite_positive_float", "int_at_least",
           "key_value", "content_type", "named_model_dir", "nonempty_text", "output_dir", "unit_float"]

Error = argparse.ArgumentTypeError


def int_at_least(low: int, what: str = "it") -> Callable[[str], int]:
    """An integer >= ``low``; ``what`` names the quantity in the message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise Error(f"{text!r} is not an integer; give a whole number >= {low}") from None
        if value < low:
            raise Error(f"{value} is too small: {what} must be at least {low}")
        return value

    parse.__name__ = f"integer >= {low}"  # argparse names the type in some messages
    return parse


def even_int(text: str) -> int:
    """A positive even integer (an encoding width: sin/cos and rotary pairs)."""
    value = int_at_least(2, "the width")(text)
    if value % 2:
        raise Error(f"{value} is odd: the encodings pair dimensions (sin/cos, rotary), use an even width "
                    f"such as {value + 1}")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise Error(f"{text!r} is not a number") from None


def unit_float(text: str) -> float:
    """A trajectory strength (alpha) in [0, 1]."""
    from ..checks import check_strength_value

    try:
        return check_strength_value(_float(text))
    except ValueError as exc:
        raise Error(str(exc)) from None


def finite_positive_float(text: str) -> float:
    """The trajectory magnitude scaling beta, a finite number > 0."""
    from ..checks import check_beta

    try:
        return check_beta(_float(text))
    except ValueError as exc:
        raise Error(str(exc)) from None


def nonempty_text(text: str) -> str:
    if not text.strip():
        raise Error("the text is empty; give a sentence with at least one word")
    return text


def existing_file(text: str) -> str:
    path = Path(text)
    if not path.is_file():
        hint = "it is a folder, give a file in it" if path.is_dir() else "check the path"
        raise Error(f"no file at {text!r} ({hint}; relative paths start from {Path.cwd()})")
    return text


def existing_dir(text: str) -> str:
    path = Path(text)
    if not path.is_dir():
        hint = "it is a file, give its folder" if path.exists() else "check the path"
        raise Error(f"no folder at {text!r} ({hint}; relative paths start from {Path.cwd()})")
    return text


def output_dir(text: str) -> str:
    """A folder to write into: it may exist (as a folder) or not yet; it is not created here."""
    if not text:
        raise Error("the output folder is empty; give a path such as outputs/run")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise Error(f"{text!r} is a file, not a folder; give a folder path for the outputs")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise Error(f"{text!r} cannot be created: {parent} is a file")
            break
    return text


_DEVICE = re.compile(r"(cpu|cuda(:\d+)?)")


def device(text: str) -> str:
    """``cpu`` or ``cuda[:N]``, by syntax; whether the CUDA device exists is checked when torch is loaded."""
    if not _DEVICE.fullmatch(text):
        raise Error(f"{text!r} is not a torch device; use cpu, cuda or cuda:N")
    return text


def key_value(text: str) -> str:
    """A dotted ``key=value`` override (the value is parsed as YAML later, by the config)."""
    key, sep, _ = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise Error(f"{text!r} is not key=value; write e.g. train.steps=300 (no spaces around '=')")
    if any(not part for part in key.split(".")):
        raise Error(f"{text!r}: the key {key!r} has an empty part; write dotted keys such as train.steps")
    return text


def content_type(text: str) -> str:
    """A registered content-type name (``hf_trajpe.data``)."""
    from ..data.registry import names  # light: hf_trajpe.data imports datasets only to build

    known = names(all_types=True)
    if text not in known:
        raise Error(f"unknown content type {text!r}; choose from {', '.join(known)}")
    return text


def named_model_dir(text: str) -> str:
    """``NAME=PATH`` with PATH an existing local model folder or ``.gguf`` file (``hf_trajpe.loading``)."""
    from ..loading import PACKAGE_PREFIX, SourceError, resolve_source  # standard library only

    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise Error(f"{text!r} is not NAME=PATH; write e.g. rope=runs/rope_s0")
    try:
        resolve_source(path, "model")
    except SourceError as err:
        if path.startswith(PACKAGE_PREFIX) or Path(path).expanduser().exists():
            raise Error(f"{text!r}: {err}") from None
        raise Error(f"{text!r}: no model folder at {path!r} (a folder written by save_pretrained, or a .gguf "
                    f"file; relative paths start from {Path.cwd()})") from None
    return text
