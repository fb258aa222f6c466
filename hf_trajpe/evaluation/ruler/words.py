"""The random strings of RULER's tasks: needle keys and values, and the word lists of common-words extraction.

RULER (``scripts/data/synthetic/niah.py`` of NVIDIA/RULER; ``lm_eval/tasks/ruler/prepare_niah.py``) draws
keys as ``adjective-noun`` pairs of the ``wonderwords`` lists, values as 7-digit numbers or version-4 UUIDs.
``wonderwords`` is not a dependency here: keys and the common words come from the project's own English
word lists (:mod:`hf_trajpe.data._words`, 317 words); common-words extraction needs more distinct words at
long lengths than those, so the list goes on with made-up words of three consonant-vowel syllables
(``bakemo``), in a fixed order.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable
from functools import lru_cache

from ...data._words import ADJECTIVES, NOUNS, VERBS

__all__ = ["VALUE_TYPES", "common_words", "random_key", "random_number", "random_uuid", "random_value"]

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


def random_number(rng: random.Random, digits: int = 7) -> str:
    """A ``digits``-digit number (RULER's ``generate_random_number``)."""
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def random_key(rng: random.Random) -> str:
    """An ``adjective-noun`` key (RULER's ``generate_random_word``)."""
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def random_uuid(rng: random.Random) -> str:
    """A version-4 UUID from 128 random bits (RULER's ``generate_random_uuid``)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


#: RULER's needle types (``type_needle_k`` / ``type_needle_v``) -> their generator
VALUE_TYPES: dict[str, Callable[[random.Random], str]] = {
    "numbers": random_number,
    "words": random_key,
    "uuids": random_uuid,
}


def random_value(kind: str, rng: random.Random) -> str:
    try:
        return VALUE_TYPES[kind](rng)
    except KeyError:
        raise ValueError(f"unknown needle type {kind!r}; known: {', '.join(VALUE_TYPES)}") from None


@lru_cache(maxsize=4)
def common_words(count: int, made_up: bool = True) -> tuple[str, ...]:
    """``count`` distinct lowercase words: the project's English words (sorted), then made-up words
    (``made_up=False``: the English words only, all of them)."""
    english = sorted(set(NOUNS) | set(ADJECTIVES) | set(VERBS))
    if not made_up:
        return tuple(english)
    if count <= len(english):
        return tuple(english[:count])
    rng = random.Random("hf_trajpe.ruler.words")
    seen, made = set(english), []
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    while len(english) + len(made) < count:
        word = "".join(rng.choice(syllables) for _ in range(3))
        if word not in seen:
            seen.add(word)
            made.append(word)
    return tuple(english + made)


def coded_word(rng: random.Random, length: int = 6) -> str:
    """A random lowercase ``coded`` word of frequent-words extraction (RULER's ``coded_wordlen`` letters)."""
    return "".join(rng.choices(string.ascii_lowercase, k=length))
