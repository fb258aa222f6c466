"""``counting``: the counting task of the CoPE paper (Golovneva et al. 2024, arXiv:2405.18719), in the format
of its data generator (``projects/cope/scripts/count_data_gen.py`` in facebookresearch/RAM).

A program of statements over ``variables`` variables (``a``, ``b``, ...), joined by spaces: ``a = 0 ;``
(SET: a variable, existing or not, to 0), ``a ++;`` (INCREMENT an existing variable) and ``pass;`` (a
dummy), drawn with weights 1 : 7 : ``pass_weight``. An INCREMENT needs a variable already set and
never takes it past 10; a statement that cannot be made is drawn again, a program with no variable set
is drawn again (with a new length), as in the reference. Then ``print <var>`` of a variable that was
set, and its value, the answer::

    pass; pass; b = 0 ; pass; b ++; pass; pass; b ++; pass; print b 2

The reference draws the number of statements from 3 to 512 with ``pass_weight`` 50; here from 3 to
``max_steps`` (16 by default, at most 117 characters) in distribution. At 16 statements the reference's
weight 50 leaves about two increments per program (59% of answers are 0, and only 1,616 of 3,000 programs
drawn are distinct), so the CPU default is ``pass_weight`` 10 (answers 0 to 10, the commonest 28%);
``pass_weight=50`` gives the reference's mix.

Two out-of-distribution splits, each changing one thing. Longer programs also hold larger counts (at the
defaults, answers of 7 or more are 2% of the in-distribution programs and 22% of those of 17-32
statements), so a plain "longer programs" split would mix a length shift with a value shift:

- ``test_ood`` (length): ``max_steps + 1`` to ``2 * max_steps`` statements, with exactly as many programs
  per answer value as ``test`` has (:class:`~.registry.Matched`): the answers are those of the in-distribution
  test, only the programs are longer;
- ``test_ood_value`` (value): in-distribution lengths, answers from ``ood_min_value`` up (default 7, or
  ``max_steps // 2`` where programs are shorter than 14 statements): counts the models rarely saw in
  training, in programs as long as those they trained on.
"""

from __future__ import annotations

import random
import string
from functools import partial

from .registry import Matched, Task, register_task, task_splits

__all__ = ["MAX_VALUE", "REFERENCE_WEIGHTS", "answer_of", "generate"]

MAX_VALUE = 10
REFERENCE_WEIGHTS = {"set": 1, "pass": 50, "increment": 7}  # the reference's OP_WEIGHTS (SET, DUMMY, INCREMENT)
DEFAULTS = {"variables": 3, "min_steps": 3, "max_steps": 16, "ood_min_steps": None, "ood_max_steps": None,
            "pass_weight": 10, "ood_min_value": None}
#: the smallest answer of ``test_ood_value`` by default (``ood_min_value: None``; ``max_steps // 2`` if lower)
OOD_MIN_VALUE = 7


class _Fail(Exception):
    pass


def _statement(rng: random.Random, names: str, state: dict[str, int], weights: dict[str, float]) -> str:
    for _ in range(100):
        op = rng.choices(list(weights), list(weights.values()))[0]
        if op == "set":
            var = rng.choice(names)
            state[var] = 0
            return f"{var} = 0 ;"
        if op == "pass":
            return "pass;"
        if not state:
            continue
        var = rng.choice(list(state))
        if state[var] + 1 > MAX_VALUE:
            continue
        state[var] += 1
        return f"{var} ++;"
    raise RuntimeError("counting: could not draw a statement in 100 tries")


def generate(rng: random.Random, variables: int, min_steps: int, max_steps: int,
             pass_weight: float = REFERENCE_WEIGHTS["pass"]) -> tuple[str, list[list[int]], str]:
    if not 1 <= variables <= 26 or not 1 <= min_steps <= max_steps or not pass_weight >= 0:
        raise ValueError(f"counting needs 1-26 variables, 1 <= min_steps <= max_steps and pass_weight >= 0, got "
                         f"{variables}, {min_steps}, {max_steps}, {pass_weight}")
    names = string.ascii_lowercase[:variables]
    weights = {**REFERENCE_WEIGHTS, "pass": pass_weight}
    for _ in range(1000):
        steps = rng.randint(min_steps, max_steps)
        state: dict[str, int] = {}
        context = [_statement(rng, names, state, weights) for _ in range(steps)]
        if not state:
            continue  # print needs a variable that was set: the reference draws the program again
        var = rng.choice(list(state))
        answer = str(state[var])
        text = " ".join(context) + f" print {var} {answer}"
        return (text, [[len(text) - len(answer), len(text)]],
                f"generated:counting/variables={variables}/steps={steps}")
    raise RuntimeError("counting: no program with a variable set in 1000 tries")


def answer_of(example) -> int:
    """The answer of a generated ``(text, spans, source)``: the printed value."""
    text, spans, _ = example
    return int(text[spans[0][0]:spans[0][1]])


def _at_least(rng: random.Random, generate, min_value: int, tries: int = 100_000):
    for _ in range(tries):
        example = generate(rng)
        if answer_of(example) >= min_value:
            return example
    raise RuntimeError(f"counting: no program with an answer >= {min_value} in {tries} tries (lower ood_min_value)")


def make_splits(sizes, seed, variables, min_steps, max_steps, ood_min_steps, ood_max_steps, pass_weight,
                ood_min_value, train_seed=None):
    ood_lo = max_steps + 1 if ood_min_steps is None else ood_min_steps
    ood_hi = 2 * max_steps if ood_max_steps is None else ood_max_steps
    if ood_min_value is None:
        ood_min_value = max(1, min(OOD_MIN_VALUE, max_steps // 2))
    if not 1 <= ood_min_value <= min(MAX_VALUE, max_steps - 1):
        raise ValueError(f"counting: ood_min_value must be from 1 to {min(MAX_VALUE, max_steps - 1)} (a count of n "
                         f"takes a SET and n increments, so at most max_steps - 1), got {ood_min_value}")
    gen = partial(generate, variables=variables, pass_weight=pass_weight)
    in_distribution = partial(gen, min_steps=min_steps, max_steps=max_steps)
    return task_splits("counting", {
        "test": in_distribution,
        "test_ood": Matched(partial(gen, min_steps=ood_lo, max_steps=ood_hi), like="test", key=answer_of),
        "test_ood_value": partial(_at_least, generate=in_distribution, min_value=ood_min_value),
        "train": in_distribution,
    }, sizes, seed, train_seed)


register_task(Task(
    name="counting",
    description="SET/INCREMENT/pass programs over a few variables; answer: the printed variable's value",
    paper="Golovneva et al. 2024, Contextual Position Encoding (arXiv:2405.18719), counting task; format of "
          "facebookresearch/RAM projects/cope/scripts/count_data_gen.py",
    test_splits={"test": "3 to max_steps statements, in distribution",
                 "test_ood": "max_steps + 1 to 2 x max_steps statements, the answers of `test`: longer programs only",
                 "test_ood_value": "in-distribution lengths, answers >= ood_min_value: larger counts only"},
    make_splits=make_splits,
    defaults=DEFAULTS,
))
