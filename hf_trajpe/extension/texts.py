"""The documents an extension reads: validation text (the user's files, or this machine's real text of the
validation split) to choose on, and the machine's test documents per kind to report on. Never the same text: the
machine's splits are disjoint by file, and a user's file that is one of the test documents is refused.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from ..data.text_files import text_files
from ..evaluation.long_context import LONG_KINDS

__all__ = ["KIND_NAMES", "check_apart", "fingerprint", "test_documents", "test_file_paths", "text_files",
           "validation_documents"]

#: what each kind of the machine's long text is, in words
KIND_NAMES = {"stdlib": "code (Python standard library)", "license": "prose (licence texts)",
              "man": "manual pages"}


def fingerprint(ids: torch.Tensor) -> str:
    """A short hash of a document's token ids: the same text under the same tokenizer, or not."""
    return hashlib.sha1(ids.to(torch.int64).numpy().tobytes()).hexdigest()[:16]


@functools.cache
def _files(kind: str) -> tuple[tuple[str, Path], ...]:
    """A kind's files as ``(key, path)`` in the fixed order of :mod:`hf_trajpe.data.real_text`, listed once per
    process (the standard library's listing alone takes a good part of a second)."""
    from ..data.real_text import KINDS, _order

    files, _ = KINDS[kind]
    return tuple(sorted(files(), key=lambda kp: _order(kp[0])))


def long_documents(tokenizer, kind: str, min_tokens: int, count: int, split: str) -> list[dict]:
    """:func:`hf_trajpe.evaluation.long_context.long_documents` over the file list of :func:`_files`."""
    from ..evaluation.long_context import long_documents as documents

    return documents(tokenizer, kind, min_tokens, count, split, files=_files(kind))


def _user_documents(tokenizer, target: int, paths: Sequence[str | os.PathLike], count: int) -> list[dict]:
    files = text_files(paths)
    if not files:
        raise ValueError(f"no text file in {', '.join(map(os.fspath, paths))}: give files of text to validate on")
    text = "\n\n".join(p.read_text(encoding="utf-8", errors="replace").strip() for p in files)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    if ids.numel() < target:
        raise ValueError(f"the validation text has {ids.numel():,} tokens; reading {target:,} tokens needs at least "
                         f"{target:,} in one piece: give more text (--validation) or a lower --to")
    names = files[0].name + (f" and {len(files) - 1} more" if len(files) > 1 else "")
    pieces = min(count, ids.numel() // target)
    return [{"source": f"validation text ({names}), tokens {k * target:,}-{(k + 1) * target - 1:,}",
             "ids": ids[k * target:(k + 1) * target].clone(), "files": [str(p.resolve()) for p in files]}
            for k in range(pieces)]


def _machine_documents(tokenizer, target: int, kinds: Sequence[str], count: int, split: str) -> list[dict]:
    """Up to ``count`` documents of ``split`` taken from the kinds in turn."""
    asked = math.ceil(count / len(kinds))
    per_kind = {kind: long_documents(tokenizer, kind, target, asked, split) for kind in kinds}
    if sum(map(len, per_kind.values())) < count:  # some kinds have fewer: ask the others for more
        for kind in kinds:
            if len(per_kind[kind]) == asked < count:
                per_kind[kind] = long_documents(tokenizer, kind, target, count, split)
    out: list[dict] = []
    for k in range(count):
        for kind in kinds:
            if k < len(per_kind.get(kind, [])) and len(out) < count:
                out.append(per_kind[kind][k])
    return out


def validation_documents(tokenizer, target: int, paths: Sequence[str | os.PathLike] | None = None, count: int = 3,
                         kinds: Sequence[str] = LONG_KINDS) -> list[dict]:
    """``count`` validation documents of ``target`` tokens (``{"source", "ids"}``): pieces of the user's text in
    order (its files joined by a blank line), or the machine's validation files of ``kinds`` in turn."""
    if paths:
        return _user_documents(tokenizer, target, paths, count)
    docs = _machine_documents(tokenizer, target, kinds, count, "validation")
    if not docs:
        raise ValueError(f"no validation document of this machine's text ({', '.join(kinds)}) has {target:,} tokens; "
                         f"give your own text of at least {target:,} tokens with --validation FILE, or a lower --to")
    return docs


def test_documents(tokenizer, target: int, kinds: Sequence[str] = LONG_KINDS, count: int = 2) -> dict[str, list[dict]]:
    """Per kind, up to ``count`` test documents of ``target`` tokens; kinds without one are left out (an error when
    every kind is)."""
    out = {kind: long_documents(tokenizer, kind, target, count, "test") for kind in kinds}
    out = {k: v for k, v in out.items() if v}
    if not out:
        raise ValueError(f"no test document of this machine's text ({', '.join(kinds)}) has {target:,} tokens, so "
                         "there is nothing to report on: give a lower --to or other --kinds")
    return out


def test_file_paths(docs: dict[str, list[dict]]) -> dict[str, str]:
    """Resolved path -> source of each test document (``kind:key`` of :mod:`hf_trajpe.data.real_text`)."""
    wanted = {d["source"] for v in docs.values() for d in v}
    out = {}
    for kind in {s.split(":", 1)[0] for s in wanted}:
        for key, path in _files(kind):
            if f"{kind}:{key}" in wanted:
                out[str(Path(path).resolve())] = f"{kind}:{key}"
    return out


def check_apart(validation: list[dict], test: dict[str, list[dict]]) -> None:
    """A ``ValueError`` when a validation file is one of the test documents, or a validation piece equals one."""
    tests = test_file_paths(test)
    for doc in validation:
        for path in doc.get("files", []):
            if path in tests:
                raise ValueError(f"validation file {path} is the test document {tests[path]}: choosing on the text "
                                 "reported on would grade the choice on its own evidence; give other text")
    marks = {fingerprint(d["ids"]): d["source"] for v in test.values() for d in v}
    for doc in validation:
        if fingerprint(doc["ids"]) in marks:
            raise ValueError(f"the validation piece {doc['source']} is the test document "
                             f"{marks[fingerprint(doc['ids'])]}; give other text")
