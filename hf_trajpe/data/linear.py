"""``linear_progression``: items that advance by a steady step (docs/spec.md, section 3).

Every example is a title line, then a body whose leading quantity advances by one constant step.
Four formats, chosen at random (the ``source`` column names it):

- ``series``: an arithmetic series, integer or decimal, rising or falling, wrapped 6-12 per line:
  ``Series:`` / ``17, 24, 31, 38, 45, 52, 59, 66``
- ``log``: a dated service log; timestamps advance by a fixed interval, the ``#`` counter by one:
  ``2019-04-03 09:15 INFO queue: job_started #41`` / ``2019-04-03 09:45 WARN queue: heartbeat #42``
- ``steps``: numbered instructions: ``Step 1. Clean the rusty lamp.`` / ``Step 2. Fold the ...``
- ``table``: a yearly table where both the year and the value advance steadily:
  ``1984: 120 boxes`` / ``1986: 135 boxes`` / ``1988: 150 boxes``
"""

from __future__ import annotations

import datetime as dt
import random
from functools import partial

from ._words import ADJECTIVES, EVENTS, NOUNS, SERVICES, UNITS, VERBS
from .registry import ContentType, generated_splits, register

__all__ = ["FORMATS", "generate"]


def _fmt(x: float, decimals: int) -> str:
    return f"{x:.{decimals}f}" if decimals else str(int(round(x)))


def _series(rng: random.Random, min_chars: int) -> str:
    decimals = rng.choice((0, 0, 0, 1, 2))
    step = rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 20, 25, 50, 100)) / (10 ** decimals)
    step *= rng.choice((1, 1, 1, -1))
    start = rng.randint(-50, 1000) / (10 ** decimals)
    title = rng.choice(("Series:", "Sequence:", "Counting:", "Values:", f"Series {rng.choice(NOUNS)}:"))
    lines, k, text = [title], 0, title
    while len(text) < min_chars:
        width = rng.randint(6, 12)
        items = [_fmt(start + (k + j) * step, decimals) for j in range(width)]
        k += width
        lines.append(", ".join(items) + ",")
        text = "\n".join(lines)
    return text.rstrip(",")


def _log(rng: random.Random, min_chars: int) -> str:
    service = rng.choice(SERVICES)
    minutes = rng.choice((1, 5, 10, 15, 20, 30, 45, 60, 90, 120, 360, 1440))
    t = dt.datetime(rng.randint(2015, 2025), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                    rng.choice((0, 5, 10, 15, 30, 45)))
    counter = rng.randint(1, 5000)
    lines = [f"== {service} log =="]
    while len("\n".join(lines)) < min_chars:
        level = rng.choice(("INFO", "INFO", "INFO", "DEBUG", "WARN"))
        lines.append(f"{t:%Y-%m-%d %H:%M} {level} {service}: {rng.choice(EVENTS)} #{counter}")
        t += dt.timedelta(minutes=minutes)
        counter += 1
    return "\n".join(lines)


def _steps(rng: random.Random, min_chars: int) -> str:
    pattern = rng.choice(("Step {i}. ", "Step {i}: ", "{i}. ", "{i}) "))
    lines = [f"How to {rng.choice(VERBS)} the {rng.choice(NOUNS)}:"]
    i = 1
    while len("\n".join(lines)) < min_chars:
        sentence = f"{rng.choice(VERBS).capitalize()} the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
        if rng.random() < 0.5:
            sentence += f" with the {rng.choice(NOUNS)}"
        lines.append(pattern.format(i=i) + sentence + ".")
        i += 1
    return "\n".join(lines)


def _table(rng: random.Random, min_chars: int) -> str:
    unit = rng.choice(UNITS)
    year, year_step = rng.randint(1800, 2000), rng.choice((1, 1, 2, 5, 10))
    value, value_step = rng.randint(0, 900), rng.choice((-5, 3, 5, 7, 10, 12, 15, 20, 25, 40))
    value = max(value, -value_step * 80)  # keep falling tables non-negative for a long run
    lines = [f"{unit.capitalize()} in {rng.choice(NOUNS)} district, by year"]
    while len("\n".join(lines)) < min_chars:
        lines.append(f"{year}: {value} {unit}")
        year += year_step
        value += value_step
    return "\n".join(lines)


FORMATS = {"series": _series, "log": _log, "steps": _steps, "table": _table}


def generate(rng: random.Random, min_chars: int) -> tuple[str, str]:
    fmt = rng.choice(sorted(FORMATS))
    return FORMATS[fmt](rng, min_chars), f"generated:linear/{fmt}"


register(ContentType(
    name="linear_progression",
    description="items that advance by a steady step: series, dated logs, numbered steps, yearly tables",
    origin="generated",
    make_splits=partial(generated_splits, "linear_progression", generate),
))
