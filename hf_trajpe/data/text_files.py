"""A user's own text as files: the text files of given files and folders, in a fixed order, for the commands and
runs that read "your text" (``hf-trajpe extend --validation``, ``data.files`` of a fine-tune)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["text_files"]


def text_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Every text file of ``paths`` (a folder: its files, recursively, in name order; hidden ones and files holding
    NUL bytes skipped); a ``FileNotFoundError`` for a path that does not exist."""
    out: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += [p for p in sorted(path.rglob("*")) if p.is_file() and not p.name.startswith(".")
                    and not any(part.startswith(".") for part in p.relative_to(path).parts[:-1])]
        else:
            raise FileNotFoundError(f"text {os.fspath(given)!r} does not exist: give text files or folders of them "
                                    f"(relative paths start from {Path.cwd()})")
    return [p for p in out if b"\0" not in p.read_bytes()[:8192]]
