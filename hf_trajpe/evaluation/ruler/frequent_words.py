"""Frequent-words extraction (``fwe``): the three most frequent coded words of a Zipf-distributed text.

Template, answer prefix, the vocabulary (``length // 50`` random 6-letter words, the most frequent one
replaced by ``...`` as noise), the counts ``int(n * k^-alpha / zeta(alpha))`` with ``alpha = 2`` and
``tokens_to_generate`` = 50 follow RULER (``scripts/data/synthetic/freq_words_extraction.py`` of
NVIDIA/RULER; ``lm_eval/tasks/ruler/fwe_utils.py``). The text is the task's own haystack; the number of
words ``n`` is bisected, then the rest up to the length is filled with more of the noise word ``...`` (one
step of ``n`` can add several words: too coarse for 1% at short lengths); the answer does not change.
"""

from __future__ import annotations

import math
import random

from .fitting import fit_length, fit_size
from .task import RulerTask, register_ruler_task
from .words import coded_word

__all__ = ["ANSWER_PREFIX", "TEMPLATE", "make_fwe", "zeta"]

TEMPLATE = ("Read the following coded text and track the frequency of each coded word. Find the three most "
            "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore "
            "the dots '....'. What are the three most frequently appeared words in the above coded text?")
ANSWER_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
ALPHA, CODED_WORDLEN = 2.0, 6
SOURCE = "NVIDIA/RULER scripts/data/synthetic/freq_words_extraction.py; lm_eval/tasks/ruler/fwe_utils.py"


def zeta(alpha: float, terms: int = 10000) -> float:
    """Riemann's zeta for ``alpha > 1`` (partial sum and the Euler-Maclaurin tail; exact ``pi^2 / 6`` at 2)."""
    if alpha == 2.0:
        return math.pi**2 / 6
    partial = sum(k**-alpha for k in range(1, terms))
    return partial + terms ** (1 - alpha) / (alpha - 1) + terms**-alpha / 2


def make_fwe(tokenizer, length: int, haystack, rng: random.Random):
    vocab_size = max(length // 50, 8)
    vocab: set[str] = set()
    while len(vocab) < vocab_size:
        vocab.add(coded_word(rng, CODED_WORDLEN))
    words = sorted(vocab)
    rng.shuffle(words)
    words[0] = "..."  # the most frequent word is noise
    norm = zeta(ALPHA)
    seed = rng.randrange(2**31)

    def build(n: int, dots: int = 0) -> str:
        listed = [w for k, w in enumerate(words, start=1) for _ in range(int(n * k**-ALPHA / norm))]
        listed += ["..."] * dots
        random.Random(seed).shuffle(listed)
        return (TEMPLATE + ANSWER_PREFIX).format(context=" ".join(listed))

    what = f"fwe at {length} tokens"
    n, _, _ = fit_size(build, tokenizer, length, what, start=max(1, length // 6), strict=False)
    prompt, tokens = fit_length(lambda dots: build(n, dots), tokenizer, length, what, start=8)
    return prompt, words[1:4], tokens, {"words": n}


register_ruler_task(RulerTask(
    name="fwe", description="frequent-words extraction: the three most frequent coded words (Zipf, alpha 2)",
    source=SOURCE, max_new_tokens=50, make=make_fwe, default_haystack=None))
