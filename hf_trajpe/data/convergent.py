"""``convergent_flow``: many parts reduced into one (docs/spec.md, section 3).

An example is a run of blocks separated by blank lines, each block one of four formats (the
``source`` column lists them in order):

- ``sum``: ``12 + 7 + 30 + 4 = 53`` (the total is always right)
- ``invoice``: item lines ``3 x lamp at 1.20 = 3.60`` then ``Total: 12.40``
- ``syllogism``: a chain of premises and one conclusion:
  ``All amber kettles are pebbles.`` / ``All pebbles are valves.`` / ``Therefore, all amber kettles are valves.``
- ``report``: ``Ada counted 14 crates.`` ... ``In total, 57 crates were counted.``
"""

from __future__ import annotations

import random
from functools import partial

from ._words import ADJECTIVES, NAMES, NOUNS, PLACES, UNITS
from .registry import ContentType, generated_splits, register

__all__ = ["FORMATS", "generate"]


def _sum(rng: random.Random) -> str:
    parts = [rng.randint(1, rng.choice((9, 99, 999))) for _ in range(rng.randint(3, 9))]
    return " + ".join(map(str, parts)) + f" = {sum(parts)}"


def _invoice(rng: random.Random) -> str:
    lines = [f"Invoice {rng.randint(100, 99999)} for {rng.choice(PLACES)}"]
    total_cents = 0
    for noun in rng.sample(NOUNS, rng.randint(2, 6)):
        qty, cents = rng.randint(1, 12), rng.randint(5, 5000)
        total_cents += qty * cents
        lines.append(f"{qty} x {noun} at {cents / 100:.2f} = {qty * cents / 100:.2f}")
    lines.append(f"Total: {total_cents / 100:.2f}")
    return "\n".join(lines)


def _plural(noun: str) -> str:
    if noun.endswith(("s", "sh", "ch", "x")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _syllogism(rng: random.Random) -> str:
    subject = f"{rng.choice(ADJECTIVES)} {_plural(rng.choice(NOUNS))}"
    chain = [subject] + [_plural(n) for n in rng.sample(NOUNS, rng.randint(2, 5))]
    lines = [f"All {a} are {b}." for a, b in zip(chain, chain[1:], strict=False)]
    lines.append(f"{rng.choice(('Therefore', 'Hence', 'So', 'Thus'))}, all {chain[0]} are {chain[-1]}.")
    return "\n".join(lines)


def _report(rng: random.Random) -> str:
    unit = rng.choice(UNITS)
    verb = rng.choice(("counted", "sorted", "shipped", "checked", "logged"))
    people = rng.sample(NAMES, rng.randint(2, 7))
    counts = [rng.randint(0, 99) for _ in people]
    lines = [f"{name} {verb} {n} {unit}." for name, n in zip(people, counts, strict=True)]
    lines.append(f"In total, {sum(counts)} {unit} were {verb}.")
    return "\n".join(lines)


FORMATS = {"sum": _sum, "invoice": _invoice, "syllogism": _syllogism, "report": _report}


def generate(rng: random.Random, min_chars: int) -> tuple[str, str]:
    blocks, kinds = [], []
    while len("\n\n".join(blocks)) < min_chars:
        kind = rng.choice(sorted(FORMATS))
        kinds.append(kind)
        blocks.append(FORMATS[kind](rng))
    return "\n\n".join(blocks), "generated:convergent/" + ",".join(kinds)


register(ContentType(
    name="convergent_flow",
    description="many parts reduced into one: sums, invoices with totals, premises to a conclusion, tallies",
    origin="generated",
    make_splits=partial(generated_splits, "convergent_flow", generate),
))
