"""The registry of content types (docs/spec.md, section 3): one entry per type, keyed by name.

A content type is a :class:`ContentType`: its name, a one-line description, how its text is made
(``origin``) and ``make_splits(sizes, seed, min_chars, progress)``, which returns
``{"test": [...], "validation": [...], "train": [...]}`` lists of ``{"text", "source"}`` rows.
Generators register themselves with :func:`register`; nothing dispatches on names with if-chains.

Generated types use :func:`generated_splits`: one seeded ``random.Random`` stream, the test split
first, then validation, then train, every text unique across all three. So the test split depends
only on ``(seed, test size, min_chars)``, never on the train size.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["CONTENT_TYPE_REGISTRY", "SPLITS", "ContentType", "Row", "generated_splits", "get", "names", "register"]

SPLITS: tuple[str, ...] = ("test", "validation", "train")  # generation order, see module docstring
Row = dict  # {"text": str, "source": str}
Progress = Callable[[int], None] | None


@dataclass(frozen=True)
class ContentType:
    name: str
    description: str
    origin: str  # "generated" or "real" (+ generated part), for the docs and the report
    make_splits: Callable[..., dict[str, list[Row]]]
    default: bool = True  # in names(): the content-type study's mix and the default of every command


CONTENT_TYPE_REGISTRY: dict[str, ContentType] = {}


def register(content_type: ContentType) -> ContentType:
    if content_type.name in CONTENT_TYPE_REGISTRY:
        raise ValueError(f"content type {content_type.name!r} is registered twice")
    CONTENT_TYPE_REGISTRY[content_type.name] = content_type
    return content_type


def names(all_types: bool = False) -> list[str]:
    """Registered names, the seven of docs/spec.md, section 3, first (in its order), then any others;
    ``all_types``: also those registered with ``default=False`` (``real_text``), which are used only
    where named."""
    from ..content import CONTENT_TYPES

    wanted = [n for n, c in CONTENT_TYPE_REGISTRY.items() if all_types or c.default]
    return [n for n in CONTENT_TYPES if n in wanted] + sorted(n for n in wanted if n not in CONTENT_TYPES)


def get(name: str) -> ContentType:
    try:
        return CONTENT_TYPE_REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown content type {name!r}; known: {sorted(CONTENT_TYPE_REGISTRY)}") from None


def seeded_rng(name: str, seed: int) -> random.Random:
    """A stream that depends on the type's name and the seed only (str seeds hash with SHA-512)."""
    return random.Random(f"hf_trajpe.data:{name}:{seed}")


def generated_splits(name: str, generate: Callable[[random.Random, int], tuple[str, str]],
                     sizes: Mapping[str, int], seed: int, min_chars: int,
                     progress: Progress = None) -> dict[str, list[Row]]:
    """Draw unique examples from ``generate(rng, min_chars) -> (text, source)``, test split first."""
    rng = seeded_rng(name, seed)
    seen: set[str] = set()
    out: dict[str, list[Row]] = {}
    for split in SPLITS:
        want = int(sizes.get(split, 0))
        rows: list[Row] = []
        misses = 0
        while len(rows) < want:
            text, source = generate(rng, min_chars)
            if text in seen:
                misses += 1
                if misses > 100 + want:
                    raise RuntimeError(f"{name}: the generator keeps repeating itself ({misses} duplicates)")
                continue
            seen.add(text)
            rows.append({"text": text, "source": source})
            if progress is not None:
                progress(1)
        out[split] = rows
    return out
