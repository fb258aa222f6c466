"""``random_content``: uniform random tokens, the control where no encoding should help (docs/spec.md, section 3).

Each example is ``min_chars`` to ``1.25 * min_chars`` characters drawn independently and uniformly
from the 95 printable ASCII characters (space to ``~``). With the byte-level tokenizer every
character is one token, so the best possible model has perplexity 95 whatever its positional
encoding: cross-entropy ``ln 95 = 4.554`` nats. Example: ``q]7Z!e x,HgT0'~b...``
"""

from __future__ import annotations

import random
from functools import partial

from .registry import ContentType, generated_splits, register

__all__ = ["ALPHABET", "generate"]

ALPHABET = "".join(chr(c) for c in range(32, 127))


def generate(rng: random.Random, min_chars: int) -> tuple[str, str]:
    n = rng.randint(min_chars, max(min_chars, min_chars * 5 // 4))
    return "".join(rng.choices(ALPHABET, k=n)), "generated:random/printable-ascii"


register(ContentType(
    name="random_content",
    description="characters drawn uniformly from the 95 printable ASCII characters (the control)",
    origin="generated",
    make_splits=partial(generated_splits, "random_content", generate),
))
