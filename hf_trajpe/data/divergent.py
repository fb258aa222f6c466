"""``divergent_expansion``: one root expanded into branches (docs/spec.md, section 3).

A random tree is grown breadth-first from one root (each expanded node gets 2-4 children, labels
are unique ``adjective noun`` pairs) until its rendering reaches the requested length, then drawn in
one of three formats (the ``source`` column names it):

- ``outline``: the root as a title, then dotted numbering indented by depth, depth-first::

      Amber lamp
      1. quiet valve
        1.1. red kettle
        1.2. tiny harbor
      2. old anchor

- ``tree``: like the ``tree`` command: ``├── `` / ``└── `` / ``│   `` prefixes, depth-first.
- ``bfs``: breadth-first expansion lines ``quiet valve -> red kettle, tiny harbor``.
"""

from __future__ import annotations

import random
from functools import partial

from ._words import ADJECTIVES, NOUNS
from .registry import ContentType, generated_splits, register

__all__ = ["FORMATS", "generate"]


def _grow(rng: random.Random, budget: int) -> tuple[list[str], dict[int, list[int]]]:
    """Node labels and children lists; node 0 is the root. Grows until labels hold ``budget`` chars."""
    labels, used = [], set()

    def new_label() -> int:
        while True:
            label = f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
            if label not in used or len(used) > 0.5 * len(ADJECTIVES) * len(NOUNS):
                used.add(label)
                labels.append(label)
                return len(labels) - 1

    children: dict[int, list[int]] = {new_label(): []}
    queue, size = [0], 0
    while size < budget:
        if not queue:  # every node expanded once: start again from the leaves
            queue = [n for n, c in children.items() if not c]
        node = queue.pop(0)
        for _ in range(rng.randint(2, 4)):
            child = new_label()
            children[node].append(child)
            children[child] = []
            queue.append(child)
            size += len(labels[child]) + 8
    return labels, children


def _outline(labels, children) -> str:
    lines = [labels[0].capitalize()]

    def walk(node: int, prefix: str, depth: int) -> None:
        for k, child in enumerate(children[node], 1):
            number = f"{prefix}{k}."
            lines.append("  " * depth + f"{number} {labels[child]}")
            walk(child, number, depth + 1)

    walk(0, "", 0)
    return "\n".join(lines)


def _tree(labels, children) -> str:
    lines = [labels[0].capitalize()]

    def walk(node: int, prefix: str) -> None:
        kids = children[node]
        for k, child in enumerate(kids):
            last = k == len(kids) - 1
            lines.append(prefix + ("└── " if last else "├── ") + labels[child])
            walk(child, prefix + ("    " if last else "│   "))

    walk(0, "")
    return "\n".join(lines)


def _bfs(labels, children) -> str:
    lines, queue = [], [0]
    while queue:
        node = queue.pop(0)
        if children[node]:
            lines.append(f"{labels[node]} -> " + ", ".join(labels[c] for c in children[node]))
            queue.extend(children[node])
    return "\n".join(lines)


FORMATS = {"outline": _outline, "tree": _tree, "bfs": _bfs}


def generate(rng: random.Random, min_chars: int) -> tuple[str, str]:
    fmt = rng.choice(sorted(FORMATS))
    budget = int(min_chars * 0.6)
    while True:
        text = FORMATS[fmt](*_grow(rng, budget))
        if len(text) >= min_chars:
            return text, f"generated:divergent/{fmt}"
        budget = int(budget * 1.3) + 8


register(ContentType(
    name="divergent_expansion",
    description="one root expanded into branches: numbered outlines, directory-style trees, "
                "breadth-first expansions",
    origin="generated",
    make_splits=partial(generated_splits, "divergent_expansion", generate),
))
