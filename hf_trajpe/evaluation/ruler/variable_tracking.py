"""Variable tracking (``vt``): follow a chain of assignments ``VAR B = VAR A`` back to a value.

Template, answer prefix (its spelling "assgined" included), the chain (one chain of 4 hops: 5 variables of
5 upper-case letters, the first set to a 5-digit number), ``tokens_to_generate`` = 30 and the one-shot
example before the question (variables of 3 letters, in the noise haystack, about 500 tokens) follow RULER
(``scripts/data/synthetic/variable_tracking.py`` of NVIDIA/RULER; ``lm_eval/tasks/ruler/vt_utils.py``).
The example is shortened to a quarter of the length below 2000 tokens, and dropped to its bare chain when
even that does not fit. The chain's statements stand on lines of their own between the haystack's units
(RULER joins them into the noise with spaces). Each statement ``VAR X =`` is checked to occur once.
"""

from __future__ import annotations

import random
import string

from .fitting import FitError, fit_length, insert_at_depths
from .haystacks import Haystack, HaystackStream, get_haystack
from .task import RulerTask, register_ruler_task

__all__ = ["ANSWER_PREFIX", "TEMPLATE", "chain", "make_vt"]

TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
            "Question: Find all variables that are assigned the value {query} in the text above.")
ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables "
                 "are assgined the value {query}, they are: ")
NUM_HOPS, EXAMPLE_TOKENS, ATTEMPTS = 4, 500, 20
SOURCE = "NVIDIA/RULER scripts/data/synthetic/variable_tracking.py; lm_eval/tasks/ruler/vt_utils.py"


def chain(rng: random.Random, num_hops: int = NUM_HOPS, letters: int = 5) -> tuple[list[str], list[str], str]:
    """Variables, their assignment statements and the value (RULER's ``generate_chains``, one chain)."""
    names: list[str] = []
    while len(names) < num_hops + 1:
        name = "".join(rng.choices(string.ascii_uppercase, k=letters))
        if name not in names:
            names.append(name)
    value = str(rng.randint(10000, 99998))  # numpy's randint(10000, 99999) excludes the upper end
    statements = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]}" for j in range(num_hops)]
    return names, statements, value


def _prompt(stream: HaystackStream, n_chars: int, statements: list[str], depths: list[float], value: str,
            num_v: int) -> str:
    context = "\n".join(insert_at_depths(stream.units(n_chars), statements, depths))
    return (TEMPLATE + ANSWER_PREFIX).format(context=context, query=value, num_v=num_v)


def _example(tokenizer, length: int, rng: random.Random) -> str:
    """RULER's one-shot example: a solved prompt on the noise haystack, then a blank line."""
    names, statements, value = chain(rng, letters=3)
    stream = HaystackStream(get_haystack("noise"), 0)
    depths = sorted(rng.random() for _ in statements)
    target = EXAMPLE_TOKENS if length >= 4 * EXAMPLE_TOKENS else length // 4
    try:
        text, _ = fit_length(lambda n: _prompt(stream, n, statements, depths, value, len(names)), tokenizer, target,
                             "vt example", start=2 * target)
    except FitError:
        text = _prompt(stream, 0, statements, depths, value, len(names))
    return text + " " + " ".join(names) + "\n\n"


def make_vt(tokenizer, length: int, haystack: Haystack, rng: random.Random):
    example = _example(tokenizer, length, rng)
    for _ in range(ATTEMPTS):
        stream = HaystackStream(haystack, rng.randrange(2**31))
        names, statements, value = chain(rng)
        depths = sorted(rng.random() for _ in statements)

        def build(n_chars: int) -> str:
            return example + _prompt(stream, n_chars, statements, depths, value, len(names))  # noqa: B023

        prompt, tokens = fit_length(build, tokenizer, length, f"vt at {length} tokens on {haystack.name}",
                                    start=2 * length, limit=lambda: stream.capacity)  # noqa: B023
        if all(prompt.count(f"VAR {n} =") == 1 for n in names) and prompt.count(value) == 3:
            return prompt, names, tokens, {"depths": depths, "value": value, "haystack_seed": stream.seed}
    raise FitError(f"vt on {haystack.name}: the haystack keeps holding the chain's variables or value; "
                   "choose another haystack")


register_ruler_task(RulerTask(
    name="vt", description="variable tracking: the 5 variables a chain of 4 assignments gives one value",
    source=SOURCE, max_new_tokens=30, make=make_vt, default_haystack="noise"))
