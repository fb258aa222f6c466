"""The haystacks: the filler text a task hides its needles in, registered by name.

- ``noise``: RULER's repeated sentences ("The grass is green. The sky is blue. ...", the ``repeat`` haystack
  of ``scripts/data/synthetic/niah.py`` of NVIDIA/RULER).
- ``needles``: RULER's ``needle`` haystack: distractor needles, "One of the special magic {values} for {key}
  is: {value}." with random keys and values of the task's types (niah_multikey_2 and _3).
- every content type of :mod:`hf_trajpe.data` (the seven generated types and ``real_text``): its test
  documents, generated with a seed drawn for the sample;
- ``real_code``, ``real_prose``, ``real_license``, ``real_man``: one kind of the real text on this machine
  each (standard-library source, its docstrings, licence texts, manual pages), the test files of
  :mod:`hf_trajpe.data.real_text`, starting at a document the sample's seed picks. ``real_prose`` stands in
  for RULER's essay haystack (Paul Graham's essays, which need a download).

A haystack is a stream of *units* (lines; a line over ``MAX_UNIT_CHARS`` is cut at spaces), documents
separated by an empty unit; tasks insert their needles between units and join them with newlines. The
stream has the prefix property the length fitting relies on: more characters = the same units and more.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from .words import random_value

__all__ = ["HAYSTACK_REGISTRY", "MAX_UNIT_CHARS", "NEEDLE", "NOISE", "Haystack", "HaystackStream", "get_haystack",
           "haystack_names", "register_haystack"]

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
MAX_UNIT_CHARS = 200
BATCH = 8  # documents of a generated content type made at a time
CUT_SLACK = 16  # the last unit is cut at a space at most this many characters before the budget, else mid-word
NeedleTypes = tuple[str, str]  # (type_needle_k, type_needle_v)
#: (seed, at least this many characters, the task's needle types) -> documents; fewer when there are no more
Documents = Callable[[int, int, NeedleTypes], list[str]]


@dataclass(frozen=True)
class Haystack:
    name: str
    description: str
    origin: str  # "RULER", "generated" or "real": for the report
    documents: Documents


HAYSTACK_REGISTRY: dict[str, Haystack] = {}


def register_haystack(haystack: Haystack) -> Haystack:
    if haystack.name in HAYSTACK_REGISTRY:
        raise ValueError(f"haystack {haystack.name!r} is registered twice")
    HAYSTACK_REGISTRY[haystack.name] = haystack
    return haystack


def haystack_names() -> list[str]:
    return list(HAYSTACK_REGISTRY)


def get_haystack(name: str) -> Haystack:
    try:
        return HAYSTACK_REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown haystack {name!r}; known: {', '.join(HAYSTACK_REGISTRY)}") from None


def _cut(line: str) -> list[str]:
    """A line in pieces of at most ``MAX_UNIT_CHARS`` characters, cut at the last space when there is one."""
    out = []
    while len(line) > MAX_UNIT_CHARS:
        cut = line.rfind(" ", MAX_UNIT_CHARS // 2, MAX_UNIT_CHARS)
        cut = cut if cut > 0 else MAX_UNIT_CHARS
        out.append(line[:cut])
        line = line[cut:].lstrip(" ")
    return out + [line]


class HaystackStream:
    """The units of one sample's haystack, made on demand: ``units(n_chars)`` is the longest prefix of the
    stream with at most ``n_chars`` characters (newlines counted), its last unit cut to fill the rest (at a
    space when one is within ``CUT_SLACK`` characters, so one step of the size stays small)."""

    def __init__(self, haystack: Haystack, seed: int, needle_types: NeedleTypes = ("words", "numbers")):
        self.haystack, self.seed, self.needle_types = haystack, seed, needle_types
        self._units: list[str] = []
        self._chars = 0  # characters of self._units, one newline after each
        self._asked = 0
        self.exhausted = False

    def _fill(self, n_chars: int) -> None:
        """Ask the haystack for more documents until the units hold ``n_chars``; a haystack that gives no
        more on a larger request has run out (``exhausted``)."""
        while self._chars < n_chars and not self.exhausted:
            want = max(n_chars + n_chars // 4, 2 * self._asked, 4096)
            self._asked = want
            units: list[str] = []
            for k, doc in enumerate(self.haystack.documents(self.seed, want, self.needle_types)):
                if k:
                    units.append("")
                units += [piece for line in doc.splitlines() for piece in _cut(line.rstrip())]
            chars = sum(len(u) + 1 for u in units)
            self.exhausted = chars <= self._chars
            self._units, self._chars = units, chars

    @property
    def capacity(self) -> int | None:
        """Characters available when the haystack has run out, else None (it can grow)."""
        return self._chars if self.exhausted else None

    def units(self, n_chars: int) -> list[str]:
        self._fill(n_chars)
        out, used = [], 0
        for unit in self._units:
            if used + len(unit) + 1 > n_chars:
                rest = n_chars - used - 1
                if rest > 0:
                    space = unit.rfind(" ", max(1, rest - CUT_SLACK), rest + 1)  # a word boundary close by
                    out.append(unit[:space if space > 0 else rest])
                break
            out.append(unit)
            used += len(unit) + 1
        return out


def _noise(seed: int, n_chars: int, needle_types: NeedleTypes) -> list[str]:
    return ["\n".join([NOISE] * (n_chars // (len(NOISE) + 1) + 1))]


def _needles(seed: int, n_chars: int, needle_types: NeedleTypes) -> list[str]:
    rng = random.Random(f"hf_trajpe.ruler.needles:{seed}")
    type_k, type_v = needle_types
    lines, chars = [], 0
    while chars < n_chars:
        line = NEEDLE.format(type_needle_v=type_v, key=random_value(type_k, rng), value=random_value(type_v, rng))
        lines.append(line)
        chars += len(line) + 1
    return ["\n".join(lines)]


def _content_type(name: str) -> Documents:
    """Test documents of a generated content type, in batches of ``BATCH`` with seeds derived from the
    sample's (a generator's split need not keep its first documents when asked for more)."""

    def documents(seed: int, n_chars: int, needle_types: NeedleTypes) -> list[str]:
        from ...data.build import DEFAULT_MIN_CHARS
        from ...data.registry import get

        docs: list[str] = []
        batch = 0
        while sum(len(d) + 2 for d in docs) < n_chars:
            rows = get(name).make_splits({"test": BATCH}, seed * 1009 + batch, DEFAULT_MIN_CHARS)["test"]
            docs += [r["text"] for r in rows]
            batch += 1
        return docs

    return documents


@lru_cache(maxsize=8)
def _real_documents(kind: str) -> tuple[str, ...]:
    """Every test document of one kind of real text (``"all"``: the ``real_text`` content type's mix)."""
    from ...data.real_text import _documents, make_splits

    if kind == "all":
        with warnings.catch_warnings():  # "only N documents": all of them are wanted
            warnings.simplefilter("ignore")
            return tuple(row["text"] for row in make_splits({"test": 10**9}, 0, 200)["test"])
    return tuple(row["text"] for row in _documents(kind, "test", 200))


def _real(kind: str) -> Documents:
    """Documents of real text from one the seed picks on (the files are what they are: a seed cannot make more)."""

    def documents(seed: int, n_chars: int, needle_types: NeedleTypes) -> list[str]:
        docs = _real_documents(kind)
        if not docs:
            raise FileNotFoundError(f"no real text of kind {kind!r} on this machine (hf_trajpe.data.real_text); "
                                    "choose another haystack")
        start = seed % len(docs)
        out, chars = [], 0
        for doc in docs[start:] + docs[:start]:
            if chars >= n_chars:
                break
            out.append(doc)
            chars += len(doc) + 2
        return out

    return documents


def _register_all() -> None:
    from ...data.registry import CONTENT_TYPE_REGISTRY, names

    register_haystack(Haystack("noise", "RULER's noise: five plain sentences repeated", "RULER", _noise))
    register_haystack(Haystack("needles", "RULER's distractor needles with random keys and values", "RULER",
                               _needles))
    for name in names(all_types=True):
        ct = CONTENT_TYPE_REGISTRY[name]
        docs = _real("all") if name == "real_text" else _content_type(name)
        register_haystack(Haystack(name, ct.description, ct.origin, docs))
    for name, kind, what in (("real_code", "stdlib", "Python standard-library source"),
                             ("real_prose", "docstrings", "docstrings of the standard library (prose)"),
                             ("real_license", "license", "licence texts"),
                             ("real_man", "man", "manual pages as plain text")):
        register_haystack(Haystack(name, f"{what} on this machine", "real", _real(kind)))


_register_all()
