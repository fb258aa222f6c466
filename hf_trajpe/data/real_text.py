"""``real_text``: text written by people that every Debian/Ubuntu machine with Python has on disk, for
fine-tuning a pretrained model on something it might read in the wild (docs/finetune.md, "Real models").

Four kinds of document, one per file:

- ``stdlib``: a Python standard-library module's source (the folders the ``code_hierarchy`` type skips
  are skipped here too);
- ``docstrings``: the docstrings of that module (module, classes, functions), prose about code;
- ``license``: a licence text of ``/usr/share/common-licenses``;
- ``man``: an English manual page of ``/usr/share/man/man1`` .. ``man8`` turned into plain text (roff
  requests dropped, font and character escapes resolved).

**Split by file**, not by document: a file's SHA-256 (of its path under its root) puts it in test
(10%), validation (5%) or train, so a module's docstrings are in the same split as its source, and the
test split shares no file with train. Symbolic links are skipped (a link is another name for a page
already read under its own name, which could put one text in two splits). Within a split the kinds
take turns (so every kind is in every split while it has files), each kind's files in the order of
their hashes. A document is cut at ``MAX_CHARS``; shorter than ``min_chars``: skipped. What is found
depends on what is installed: the source of each row says which file it came from, and a kind with no
files is left out with a warning.

Not in :func:`hf_trajpe.data.registry.names` (the content-type study's mix): name it in
``data.content_types``.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from .code import EXCLUDED_DIRS, stdlib_dir
from .registry import SPLITS, ContentType, Progress, Row, register

__all__ = ["KINDS", "MAX_CHARS", "docstrings_text", "make_splits", "man_to_text", "split_of"]

MAX_CHARS = 6000
LICENSE_DIR = Path("/usr/share/common-licenses")
MAN_DIR = Path("/usr/share/man")
SPLIT_SHARES = (("test", 0.10), ("validation", 0.05))  # the rest: train


def split_of(key: str) -> str:
    """The split of a file: a function of its key (path under its root) only."""
    u = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    edge = 0.0
    for split, share in SPLIT_SHARES:
        edge += share
        if u < edge:
            return split
    return "train"


def _order(key: str) -> bytes:
    return hashlib.sha256(b"order:" + key.encode()).digest()


def docstrings_text(source: str) -> str:
    """The module's docstrings (module, then classes and functions in source order), blank-line separated."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    docs = []
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and doc not in docs:
                docs.append(doc)
    return "\n\n".join(docs)


_ESCAPES = {"-": "-", "e": "\\", "&": "", " ": " ", "|": "", "^": "", "~": " ", "0": " ", "c": "", "%": ""}
_CHARS = {"em": "--", "en": "-", "bu": "*", "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'", "cq": "'",
          "hy": "-", "mi": "-", "pl": "+", "co": "(c)", "rg": "(R)", "tm": "(TM)", "<=": "<=", ">=": ">=",
          "->": "->", "<-": "<-", "ti": "~", "ha": "^", "rs": "\\", "sl": "/", "ba": "|", "dg": "+"}
_ESCAPE = re.compile(r"\\(\((..)|\[([^\]]*)\]|f(\(..|\[[^\]]*\]|.)|\*(\(..|\[[^\]]*\]|.)|s[+-]?\d+|"
                     r"[nkg](\(..|\[[^\]]*\]|.)|.)")
_TEXT_MACROS = {"SH", "SS", "B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "TP", "IP", "UR", "MT"}


def _unescape(line: str) -> str:
    def one(m: re.Match) -> str:
        if m.group(2) is not None:  # \(xx
            return _CHARS.get(m.group(2), "")
        if m.group(3) is not None:  # \[name]
            return _CHARS.get(m.group(3), "")
        whole = m.group(1)
        if whole[0] in "f*snkg" and len(whole) > 1:  # fonts, strings, sizes, registers: no text
            return ""
        return _ESCAPES.get(whole, whole)

    return _ESCAPE.sub(one, line)


def man_to_text(roff: str) -> str:
    """Plain text of a manual page: comments and requests dropped, the text of font macros and headings
    kept, escapes resolved. Not a typesetter: tables and equations come out as their raw cells."""
    out: list[str] = []
    for raw in roff.splitlines():
        if raw.startswith((".\\\"", "'\\\"", '.\\"')) or raw.strip() in (".", "'"):
            continue
        if raw.startswith((".", "'")):
            name, _, args = raw[1:].strip().partition(" ")
            if name in ("PP", "P", "LP", "sp", "br"):
                out.append("")
            elif name in _TEXT_MACROS and args:
                text = _unescape(" ".join(a.strip('"') for a in re.findall(r'"[^"]*"|\S+', args)))
                out.append(text.upper() if name == "SH" else text)
            continue
        out.append(_unescape(raw))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _read(path: Path) -> str:
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""
    return data.decode("utf-8", errors="replace")


def _stdlib_files() -> list[tuple[str, Path]]:
    root = stdlib_dir()
    return [(p.relative_to(root).as_posix(), p) for p in sorted(root.rglob("*.py"))
            if not EXCLUDED_DIRS.intersection(p.relative_to(root).parts) and not p.is_symlink()]


def _license_files() -> list[tuple[str, Path]]:
    if not LICENSE_DIR.is_dir():
        return []
    return [(p.name, p) for p in sorted(LICENSE_DIR.iterdir()) if p.is_file() and not p.is_symlink()]


def _man_files() -> list[tuple[str, Path]]:
    if not MAN_DIR.is_dir():
        return []
    return [(p.relative_to(MAN_DIR).as_posix(), p) for section in range(1, 9)
            for p in sorted((MAN_DIR / f"man{section}").glob("*")) if p.is_file() and not p.is_symlink()]


def _man_text(path: Path) -> str:
    roff = _read(path)
    return "" if roff.lstrip().startswith(".so ") else man_to_text(roff)  # .so: a link to another page


#: kind -> (files as (key, path), the document of a file); the key decides the split
KINDS: dict[str, tuple[Callable[[], list[tuple[str, Path]]], Callable[[Path], str]]] = {
    "stdlib": (_stdlib_files, _read),
    "docstrings": (_stdlib_files, lambda p: docstrings_text(_read(p))),
    "license": (_license_files, _read),
    "man": (_man_files, _man_text),
}


def _documents(kind: str, split: str, min_chars: int) -> Iterator[Row]:
    files, text_of = KINDS[kind]
    for key, path in sorted(files(), key=lambda kp: _order(kp[0])):
        if split_of(key) != split:
            continue
        text = text_of(path).strip()[:MAX_CHARS]
        if len(text) >= min_chars:
            yield {"text": text, "source": f"{kind}:{key}"}


def make_splits(sizes: Mapping[str, int], seed: int, min_chars: int, progress: Progress = None) -> dict[str, list[Row]]:
    """``sizes[split]`` documents per split, the kinds taking turns (``seed`` is not used: the split and
    order of a file depend on its path only, so every seed sees the same test files)."""
    del seed
    out: dict[str, list[Row]] = {}
    empty = {kind for kind, (files, _) in KINDS.items() if not files()}  # nothing of this kind on the machine
    for split in SPLITS:
        want = int(sizes.get(split, 0))
        streams = {kind: _documents(kind, split, min_chars) for kind in KINDS if kind not in empty}
        rows: list[Row] = []
        while len(rows) < want and streams:
            for kind in list(streams):
                row = next(streams[kind], None)
                if row is None:
                    del streams[kind]
                    continue
                if len(rows) < want:
                    rows.append(row)
                    if progress is not None:
                        progress(1)
        if want and not rows:
            raise FileNotFoundError("real_text: no documents found on this machine (looked for the Python "
                                    f"standard library in {stdlib_dir()}, {LICENSE_DIR} and {MAN_DIR})")
        if len(rows) < want:
            warnings.warn(f"real_text: only {len(rows)} documents for the {split} split (asked for {want})",
                          stacklevel=2)
        out[split] = rows
    if empty and any(sizes.values()):
        warnings.warn(f"real_text: no {', '.join(sorted(empty))} documents on this machine; the others are used",
                      stacklevel=2)
    return out


register(ContentType(
    name="real_text",
    description="real text on the machine: Python standard-library source and docstrings, licence texts, man pages",
    origin="real",
    make_splits=make_splits,
    default=False,
))
