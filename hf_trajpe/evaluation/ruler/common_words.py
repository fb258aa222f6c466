"""Common-words extraction (``cwe``): the 10 words repeated most often in a long numbered list.

Template, answer prefix, the one-shot example before the question, the repeats (10 common words 30 times
and the others 3 times; below 4096 tokens 6 and 1, the example 3 and 1) and ``tokens_to_generate`` = 120
follow RULER (``scripts/data/synthetic/common_words_extraction.py`` of NVIDIA/RULER;
``lm_eval/tasks/ruler/cwe_utils.py``). The list is the task's own haystack. The words come from
:func:`.words.common_words` (RULER: ``wonderwords``). The number of words is bisected; the words are the
first ones of one permutation drawn for the sample (the English words first, made-up ones only when a
length needs more), so a longer list only adds words.
"""

from __future__ import annotations

import random

from .fitting import fit_length
from .task import RulerTask, register_ruler_task
from .words import common_words

__all__ = ["ANSWER_PREFIX", "TEMPLATE", "make_cwe", "numbered"]

TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
            "ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?")
ANSWER_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
NUM_CW = 10
SOURCE = "NVIDIA/RULER scripts/data/synthetic/common_words_extraction.py; lm_eval/tasks/ruler/cwe_utils.py"


def numbered(words: list[str]) -> str:
    """``1. a 2. b 3. c``: RULER's list format."""
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def _listing(words: list[str], common_repeats: int, uncommon_repeats: int, shuffle_seed: int) -> str:
    listed = words[:NUM_CW] * common_repeats + words[NUM_CW:] * uncommon_repeats
    random.Random(shuffle_seed).shuffle(listed)
    return numbered(listed)


def make_cwe(tokenizer, length: int, haystack, rng: random.Random):
    short = length < 4096
    repeats, example_repeats = ((6, 1), (3, 1)) if short else ((30, 3), (10, 3))
    vocab = common_words(max(length, 400) + NUM_CW)
    english = len(common_words(0, made_up=False))
    example_words = rng.sample(vocab[:english], 20 if short else 40)
    example = ((TEMPLATE + ANSWER_PREFIX).format(context=_listing(example_words, *example_repeats,
                                                                  rng.randrange(2**31)))
               + " " + numbered(example_words[:NUM_CW]))
    words = rng.sample(vocab[:english], english) + rng.sample(vocab[english:], len(vocab) - english)
    seed = rng.randrange(2**31)

    def build(extra: int) -> str:
        listing = _listing(words[:NUM_CW + extra], *repeats, seed)
        return example + "\n" + (TEMPLATE + ANSWER_PREFIX).format(context=listing)

    prompt, tokens = fit_length(build, tokenizer, length, f"cwe at {length} tokens", start=max(1, length // 32),
                                limit=lambda: len(words) - NUM_CW)
    return prompt, words[:NUM_CW], tokens, {}


register_ruler_task(RulerTask(
    name="cwe", description="common-words extraction: the 10 words repeated most often in a numbered list",
    source=SOURCE, max_new_tokens=120, make=make_cwe, default_haystack=None))
