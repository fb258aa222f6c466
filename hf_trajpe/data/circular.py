"""``circular_patterns``: periodic recurrence (docs/spec.md, section 3).

Three formats (the ``source`` column names it and the period):

- ``motif``: a motif of 3-8 distinct random words repeated with period = motif length; 3% of words are
  replaced by a random word so the text is periodic but not trivially so:
  ``red lamp turns quietly red lamp turns quietly red lamp ...``
- ``cycle``: a cycle of days, months or seasons, each with a fixed activity, started at a random
  point: ``Thursday: swim. Friday: read. Saturday: rest. ... Thursday: swim.`` (period = cycle length)
- ``refrain``: a song; verses of random words alternate with a fixed two-line refrain, so lines
  recur with period ``verse lines + 2``.
"""

from __future__ import annotations

import random
from functools import partial

from ._words import ADJECTIVES, DAYS, MONTHS, NOUNS, SEASONS, VERBS
from .registry import ContentType, generated_splits, register

__all__ = ["FORMATS", "NOISE", "generate"]

NOISE = 0.03  # share of motif words replaced at random
_WORDS = tuple(sorted(set(NOUNS + ADJECTIVES + VERBS)))


def _motif(rng: random.Random, min_chars: int) -> tuple[str, int]:
    motif = rng.sample(_WORDS, rng.randint(3, 8))  # distinct words: no shorter period
    words: list[str] = []
    while len(" ".join(words)) < min_chars:
        word = motif[len(words) % len(motif)]
        words.append(rng.choice(_WORDS) if rng.random() < NOISE else word)
    return " ".join(words), len(motif)


def _cycle(rng: random.Random, min_chars: int) -> tuple[str, int]:
    cycle = rng.choice((DAYS, MONTHS, SEASONS))
    activity = {name: f"{rng.choice(VERBS)} the {rng.choice(NOUNS)}" for name in cycle}
    i, parts = rng.randrange(len(cycle)), []
    sep = rng.choice((" ", "\n"))
    while len(sep.join(parts)) < min_chars:
        name = cycle[i % len(cycle)]
        parts.append(f"{name}: {activity[name]}.")
        i += 1
    return sep.join(parts), len(cycle)


def _line(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 7))).capitalize()


def _refrain(rng: random.Random, min_chars: int) -> tuple[str, int]:
    refrain = [_line(rng), _line(rng)]
    verse_lines = rng.randint(1, 3)
    lines: list[str] = []
    while len("\n".join(lines)) < min_chars:
        lines += [_line(rng) for _ in range(verse_lines)] + refrain
    return "\n".join(lines), verse_lines + len(refrain)


FORMATS = {"motif": _motif, "cycle": _cycle, "refrain": _refrain}


def generate(rng: random.Random, min_chars: int) -> tuple[str, str]:
    fmt = rng.choice(sorted(FORMATS))
    text, period = FORMATS[fmt](rng, min_chars)
    return text, f"generated:circular/{fmt}/period={period}"


register(ContentType(
    name="circular_patterns",
    description="periodic recurrence: repeated word motifs, cycles of days/months/seasons, song refrains",
    origin="generated",
    make_splits=partial(generated_splits, "circular_patterns", generate),
))
