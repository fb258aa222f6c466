"""``passkey``: passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention", arXiv:2305.16300; the
length-extrapolation probe of many position-encoding papers since).

A 5-digit key hidden in repeated filler text, asked for at the end; the answer is the key's 5 digits::

    The grass is green. The sky is blue. The pass key is 52817. Remember it. 52817 is the pass key.
    The sun is yellow. Here we go. ... What is the pass key? The pass key is 52817

The filler is the paper's five sentences, repeated in order, with the key line at a random sentence
boundary; the paper's opening instruction (148 characters) is left out to leave room for filler at
CPU sizes. Every text has at most ``length`` characters and at least ``length - 22`` (the longest
filler sentence). Trained at ``length`` (256 by default, one study block of 256 byte tokens); tested
at 1x (``test``), 2x (``test_2x``) and 4x (``test_4x``) that length, so out of distribution means
longer filler and a key further from the question.
"""

from __future__ import annotations

import random
from functools import partial

from .registry import Task, register_task, task_splits

__all__ = ["FILLER", "MULTIPLIERS", "generate"]

FILLER = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is {key}"
MULTIPLIERS = (2, 4)  # the test lengths beyond the training length, as multiples of it
DEFAULTS = {"length": 256}


def generate(rng: random.Random, length: int) -> tuple[str, list[list[int]], str]:
    key = str(rng.randint(10000, 99999))
    line, question = KEY_LINE.format(key=key), QUESTION.format(key=key)
    budget = length - len(line) - len(question) - 2  # two joining spaces
    if budget < 0:
        raise ValueError(f"passkey: length {length} is too short for the key line and the question "
                         f"(at least {len(line) + len(question) + 2} characters)")
    filler: list[str] = []
    while True:
        s = FILLER[len(filler) % len(FILLER)]
        if sum(len(f) + 1 for f in filler) + len(s) + 1 > budget:
            break
        filler.append(s)
    at = rng.randint(0, len(filler))
    text = " ".join([*filler[:at], line, *filler[at:], question])
    return text, [[len(text) - 5, len(text)]], f"generated:passkey/length={length}/depth={at}of{len(filler)}"


def make_splits(sizes, seed, length, train_seed=None):
    generators = {"test": partial(generate, length=length)}
    for m in MULTIPLIERS:
        generators[f"test_{m}x"] = partial(generate, length=m * length)
    generators["train"] = partial(generate, length=length)
    return task_splits("passkey", generators, sizes, seed, train_seed)


register_task(Task(
    name="passkey",
    description="a 5-digit key hidden in repeated filler; answer: the key, asked for at the end",
    paper="Mohtashami & Jaggi 2023, Landmark Attention (arXiv:2305.16300), passkey retrieval",
    test_splits={"test": "the training length (1x)", "test_2x": "2x the training length",
                 "test_4x": "4x the training length"},
    make_splits=make_splits,
    defaults=DEFAULTS,
))
