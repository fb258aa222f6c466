"""``code_hierarchy``: nested code (docs/spec.md, section 3): real Python source, plus generated nested JSON.

**Python (real text):** the Python standard library's own ``.py`` files on this machine
(``sysconfig.get_paths()["stdlib"]``; ``test``/``tests``/``idlelib``/``lib2to3``/``turtledemo``/
``site-packages`` folders excluded). The file list is sorted, then shuffled with the seed; files are
dealt whole to test, then validation, then train, so **no file feeds two splits**. Each file is cut
with :mod:`ast` at top-level statements (decorators included) and consecutive statements are joined
until a chunk reaches ``min_chars``; a class too long for one chunk is cut at its methods, each
chunk repeating the ``class ...:`` header line(s). Every chunk therefore compiles. Leftovers shorter
than ``min_chars`` at the end of a file are dropped. ``source`` is ``stdlib:<relative path>:<first line>``.

**JSON (generated):** a share ``json_fraction`` (default 0.25) of each split is random nested JSON
(objects and lists 2-5 levels deep, keys from a word list), indented or compact. ``source`` is
``generated:json``. Example::

    {
      "lamp": {
        "valve": [17, "amber", {"kettle": null, "rope": 0.25}],
    ...
"""

from __future__ import annotations

import ast
import json
import random
import sysconfig
import warnings
from collections.abc import Mapping
from functools import partial
from pathlib import Path

from ._words import ADJECTIVES, NOUNS
from .registry import SPLITS, ContentType, Progress, Row, register, seeded_rng

__all__ = ["EXCLUDED_DIRS", "file_chunks", "make_splits", "nested_json", "python_files", "stdlib_dir"]

EXCLUDED_DIRS = frozenset({"test", "tests", "idlelib", "lib2to3", "turtledemo", "site-packages",
                           "dist-packages", "__pycache__"})
JSON_FRACTION = 0.25


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def python_files(root: Path | None = None) -> list[Path]:
    """Sorted ``.py`` files under ``root`` (default: the standard library), excluded folders skipped."""
    root = Path(root) if root is not None else stdlib_dir()
    return sorted(p for p in root.rglob("*.py") if not EXCLUDED_DIRS.intersection(p.relative_to(root).parts))


def _start(node: ast.stmt) -> int:
    """0-based first line of a statement, its decorators included."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators]) - 1


def _segments(body: list[ast.stmt], lines: list[str], max_chars: int) -> list[tuple[str, str]]:
    """``(header, text)`` pieces: whole statements, or a long class's statements under its header."""
    out = []
    for node in body:
        text = "\n".join(lines[_start(node):node.end_lineno])
        if len(text) <= max_chars:
            out.append(("", text))
        elif isinstance(node, ast.ClassDef) and node.body:
            header = "\n".join(lines[_start(node):_start(node.body[0])]).rstrip()
            if not header.endswith(":"):  # body on the header line, or a comment between: skip
                continue
            for sub in node.body:
                sub_text = "\n".join(lines[_start(sub):sub.end_lineno])
                if len(header) + len(sub_text) < max_chars:
                    out.append((header, sub_text))
    return out


def file_chunks(path: Path, min_chars: int, max_chars: int | None = None) -> list[str]:
    """Compilable chunks of one Python file, each at least ``min_chars`` long (see module docstring)."""
    max_chars = max_chars or max(4 * min_chars, 2000)
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return []
    chunks, header, parts = [], "", []

    def flush() -> None:
        body = "\n\n".join(parts)
        text = f"{header}\n{body}" if header else body
        if len(text) >= min_chars:
            chunks.append(text)

    for seg_header, text in _segments(tree.body, source.splitlines(), max_chars):
        if seg_header != header and parts:
            flush()
            parts = []
        header = seg_header
        parts.append(text)
        size = len(header) + sum(len(p) + 2 for p in parts)
        if size >= min_chars:
            flush()
            parts = []
    return chunks


def _json_value(rng: random.Random, depth: int):
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice((lambda: rng.randint(-999, 9999), lambda: round(rng.uniform(-100, 100), 2),
                           lambda: rng.choice(ADJECTIVES), lambda: rng.choice((True, False, None))))()
    if rng.random() < 0.35:
        return [_json_value(rng, depth - 1) for _ in range(rng.randint(1, 4))]
    return {key: _json_value(rng, depth - 1) for key in rng.sample(NOUNS, rng.randint(1, 4))}


def nested_json(rng: random.Random, min_chars: int) -> str:
    """A random nested JSON object at least ``min_chars`` long."""
    indent = rng.choice((2, 2, 4, None))
    obj: dict = {}
    while True:
        obj[f"{rng.choice(NOUNS)}_{len(obj)}"] = {k: _json_value(rng, rng.randint(2, 4))
                                                  for k in rng.sample(NOUNS, rng.randint(1, 3))}
        text = json.dumps(obj, indent=indent)
        if len(text) >= min_chars:
            return text


def make_splits(sizes: Mapping[str, int], seed: int, min_chars: int, progress: Progress = None,
                root: Path | None = None, json_fraction: float = JSON_FRACTION) -> dict[str, list[Row]]:
    rng = seeded_rng("code_hierarchy", seed)
    json_rng = seeded_rng("code_hierarchy/json", seed)
    files = python_files(root)
    rng.shuffle(files)
    base = root if root is not None else stdlib_dir()
    seen: set[str] = set()
    out: dict[str, list[Row]] = {}
    for split in SPLITS:
        want = int(sizes.get(split, 0))
        n_json = round(want * json_fraction) if files else want
        rows: list[Row] = []
        while len(rows) < want - n_json and files:
            path = files.pop(0)
            for text in file_chunks(path, min_chars):
                if len(rows) < want - n_json and text not in seen:
                    seen.add(text)
                    rows.append({"text": text, "source": f"stdlib:{path.relative_to(base).as_posix()}"})
                    if progress is not None:
                        progress(1)
        if len(rows) < want - n_json:
            warnings.warn(f"code_hierarchy: only {len(rows)} Python chunks left for the {split} split; "
                          "the rest is generated JSON", stacklevel=2)
        while len(rows) < want:
            text = nested_json(json_rng, min_chars)
            if text not in seen:
                seen.add(text)
                rows.append({"text": text, "source": "generated:json"})
                if progress is not None:
                    progress(1)
        rng.shuffle(rows)
        out[split] = rows
    return out


register(ContentType(
    name="code_hierarchy",
    description="nested code: chunks of the Python standard library's own source (real), "
                "plus generated nested JSON",
    origin="real",
    make_splits=partial(make_splits),
))
