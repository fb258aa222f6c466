"""``selective_copy``: copy the non-blank tokens of a sequence, in order (the selective copy task of Gu & Dao
2023, Mamba, as used in the CoPE paper, Golovneva et al. 2024, arXiv:2405.18719).

A context of ``tokens`` symbols drawn uniformly from a vocabulary of 16 (``a``-``p``) placed at random
among ``blanks`` blanks (``.``), a separator ``|``, then the answer: the symbols in their order, e.g.
``.ab..c.d|abcd``. In distribution as many blanks as symbols (the CoPE paper's 128 blank / 128 non-blank);
out of distribution ``test_ood_sparse`` has twice as many blanks (the paper's 256 / 128) and
``test_ood_dense`` half as many (64 / 128). Here 16 symbols by default (the paper 128), an option.
"""

from __future__ import annotations

import random
from functools import partial

from .registry import Task, register_task, task_splits

__all__ = ["BLANK", "SEPARATOR", "VOCABULARY", "generate"]

VOCABULARY = "abcdefghijklmnop"
BLANK, SEPARATOR = ".", "|"
DEFAULTS = {"tokens": 16, "blanks": 16, "blanks_sparse": 32, "blanks_dense": 8}


def generate(rng: random.Random, tokens: int, blanks: int) -> tuple[str, list[list[int]], str]:
    if tokens < 1 or blanks < 0:
        raise ValueError(f"selective_copy needs tokens >= 1 and blanks >= 0, got {tokens} and {blanks}")
    symbols = rng.choices(VOCABULARY, k=tokens)
    slots = sorted(rng.sample(range(tokens + blanks), tokens))
    context = [BLANK] * (tokens + blanks)
    for slot, s in zip(slots, symbols, strict=True):
        context[slot] = s
    text = "".join(context) + SEPARATOR + "".join(symbols)
    start = tokens + blanks + 1
    return text, [[start, len(text)]], f"generated:selective_copy/tokens={tokens}/blanks={blanks}"


def make_splits(sizes, seed, tokens, blanks, blanks_sparse, blanks_dense, train_seed=None):
    gen = partial(generate, tokens=tokens)
    return task_splits("selective_copy", {
        "test": partial(gen, blanks=blanks),
        "test_ood_sparse": partial(gen, blanks=blanks_sparse),
        "test_ood_dense": partial(gen, blanks=blanks_dense),
        "train": partial(gen, blanks=blanks),
    }, sizes, seed, train_seed)


register_task(Task(
    name="selective_copy",
    description="symbols among blanks; answer: the symbols in order, after a separator",
    paper="Golovneva et al. 2024, Contextual Position Encoding (arXiv:2405.18719), selective copy "
          "(from Gu & Dao 2023, Mamba)",
    test_splits={"test": "as many blanks as symbols, in distribution", "test_ood_sparse": "2x the blanks",
                 "test_ood_dense": "0.5x the blanks"},
    make_splits=make_splits,
    defaults=DEFAULTS,
))
