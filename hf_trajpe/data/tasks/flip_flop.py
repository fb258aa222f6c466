"""``flip_flop``: flip-flop language modelling (Liu et al. 2023, "Exposing Attention Glitches with Flip-Flop
Language Modeling", arXiv:2306.00946), the 1-bit register.

A sequence is ``instructions`` instruction-bit pairs written without separators, as in the paper's data
(``w1i1w0i0r0...``): ``w`` writes its bit, ``i`` is ignored (its bit is noise), ``r`` reads: its bit is
the last written bit. The first instruction is always ``w`` and the last always ``r``, every other is
``i`` with probability ``p_i`` and ``w`` or ``r`` with ``(1 - p_i) / 2`` each: FFL(p_i). The answers are
the bits after every ``r`` (one character each); everything else is random.

In distribution FFL(0.8) (train, validation, ``test``); out of distribution the paper's two other
densities: ``test_ood_sparse`` FFL(0.98) (long gaps between a write and its read) and ``test_ood_dense``
FFL(0.1) (many writes and reads). The paper uses 256 instructions (512 characters); here 64 (128
characters, one block of the study) by default, an option.
"""

from __future__ import annotations

import random
from functools import partial

from .registry import Task, register_task, task_splits

__all__ = ["generate"]

DEFAULTS = {"instructions": 64, "p_ignore": 0.8, "p_ignore_sparse": 0.98, "p_ignore_dense": 0.1}


def generate(rng: random.Random, instructions: int, p_ignore: float) -> tuple[str, list[list[int]], str]:
    if instructions < 2:
        raise ValueError(f"flip_flop needs at least 2 instructions (a write and a read), got {instructions}")
    ops = ["w"]
    for _ in range(instructions - 2):
        u = rng.random()
        ops.append("i" if u < p_ignore else ("w" if u < p_ignore + (1 - p_ignore) / 2 else "r"))
    ops.append("r")
    chars, spans, register = [], [], "0"
    for k, op in enumerate(ops):
        if op == "r":
            bit = register
            spans.append([2 * k + 1, 2 * k + 2])
        else:
            bit = rng.choice("01")
            if op == "w":
                register = bit
        chars += [op, bit]
    return "".join(chars), spans, f"generated:flip_flop/p_i={p_ignore:g}/instructions={instructions}"


def make_splits(sizes, seed, instructions, p_ignore, p_ignore_sparse, p_ignore_dense, train_seed=None):
    gen = partial(generate, instructions=instructions)
    return task_splits("flip_flop", {
        "test": partial(gen, p_ignore=p_ignore),
        "test_ood_sparse": partial(gen, p_ignore=p_ignore_sparse),
        "test_ood_dense": partial(gen, p_ignore=p_ignore_dense),
        "train": partial(gen, p_ignore=p_ignore),
    }, sizes, seed, train_seed)


register_task(Task(
    name="flip_flop",
    description="w/i/r instructions on a 1-bit register; answer: the bit after each r (the last written bit)",
    paper="Liu et al. 2023, Exposing Attention Glitches with Flip-Flop Language Modeling (arXiv:2306.00946)",
    test_splits={"test": "FFL(0.8), in distribution", "test_ood_sparse": "FFL(0.98): sparse, long gaps",
                 "test_ood_dense": "FFL(0.1): dense"},
    make_splits=make_splits,
    defaults=DEFAULTS,
))
