"""Needle in a haystack, RULER's eight variants: single, multi-key, multi-value and multi-query needles.

Template, needle, answer prefix, the singular rewording of a one-answer question, the needle values and
``tokens_to_generate`` = 128 follow RULER (``scripts/data/synthetic/niah.py`` and
``scripts/synthetic.yaml`` of NVIDIA/RULER, as carried by lm-evaluation-harness in
``lm_eval/tasks/ruler/niah_utils.py`` and ``prepare_niah.py``). Needles sit at depths drawn without
replacement from RULER's 40 depths (RULER's essay placement; its noise haystack draws unit indexes
instead). Every key and value of a needle is checked to occur in the prompt exactly as often as the needles
and the question put it there (drawn again otherwise), so no haystack can hold a second copy of an answer.
RULER's own haystack of each variant is its ``default_haystack``; its essays are replaced by ``real_prose``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .fitting import DEPTHS, FitError, fit_length, insert_at_depths
from .haystacks import NEEDLE, Haystack, HaystackStream
from .task import RulerTask, register_ruler_task
from .words import random_value

__all__ = ["ANSWER_PREFIX", "TEMPLATE", "NeedleSpec", "make_niah"]

TEMPLATE = ("Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
            "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic "
            "{type_needle_v} for {query} mentioned in the provided text?")
ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
SOURCE = "NVIDIA/RULER scripts/data/synthetic/niah.py; lm_eval/tasks/ruler/niah_utils.py, prepare_niah.py"
ATTEMPTS = 20


@dataclass(frozen=True)
class NeedleSpec:
    type_k: str = "words"
    type_v: str = "numbers"
    num_k: int = 1
    num_v: int = 1
    num_q: int = 1


def _template(spec: NeedleSpec) -> tuple[str, str]:
    """The template with its answer prefix, and the value type as the question names it (RULER's rewording
    when one answer is asked for)."""
    template, type_v = TEMPLATE + ANSWER_PREFIX, spec.type_v
    if spec.num_q * spec.num_v == 1:
        for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
            template = template.replace(old, new)
        type_v = type_v[:-1]
    return template, type_v


def _draw(spec: NeedleSpec, rng: random.Random) -> tuple[list[str], list[list[str]], list[str], list[str]]:
    """Keys, their values, the needle sentences (shuffled) and the queried keys."""
    num_k = max(spec.num_k, spec.num_q)
    keys, values, needles = [], [], []
    for _ in range(num_k):
        keys.append(random_value(spec.type_k, rng))
        values.append([random_value(spec.type_v, rng) for _ in range(spec.num_v)])
        needles += [NEEDLE.format(type_needle_v=spec.type_v, key=keys[-1], value=v) for v in values[-1]]
    rng.shuffle(needles)
    queries = [keys[i] for i in rng.sample(range(num_k), spec.num_q)]
    return keys, values, needles, queries


def _placed_once(prompt: str, shell: str, keys: list[str], values: list[list[str]]) -> bool:
    """Keys distinct, every value once in the needles, and no key or value more often in the prompt than in
    ``shell`` (the prompt with the needles and no haystack)."""
    flat = [v for vs in values for v in vs]
    return (len(set(keys)) == len(keys) and all(shell.count(v) == 1 for v in flat)
            and all(prompt.count(x) == shell.count(x) for x in keys + flat))


def make_niah(spec: NeedleSpec, tokenizer, length: int, haystack: Haystack, rng: random.Random):
    template, type_v = _template(spec)
    for _ in range(ATTEMPTS):
        stream = HaystackStream(haystack, rng.randrange(2**31), (spec.type_k, spec.type_v))
        keys, values, needles, queries = _draw(spec, rng)
        depths = [d / 100 for d in rng.sample(DEPTHS, len(needles))]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]

        def build(n_chars: int) -> str:
            context = "\n".join(insert_at_depths(stream.units(n_chars), needles, depths))  # noqa: B023
            return template.format(type_needle_v=type_v, context=context, query=query)  # noqa: B023

        prompt, tokens = fit_length(build, tokenizer, length, f"niah at {length} tokens on {haystack.name}",
                                    start=2 * length, limit=lambda: stream.capacity)  # noqa: B023
        shell = template.format(type_needle_v=type_v, context="\n".join(needles), query=query)
        if _placed_once(prompt, shell, keys, values):
            answers = [v for q in queries for v in values[keys.index(q)]]
            return prompt, answers, tokens, {"depths": depths, "queries": queries, "haystack_seed": stream.seed}
    raise FitError(f"niah on {haystack.name}: could not place needles whose keys and values occur only where "
                   f"they are put in {ATTEMPTS} draws; the haystack repeats the needle values")


def _register(name: str, description: str, spec: NeedleSpec, haystack: str) -> None:
    register_ruler_task(RulerTask(
        name=name, description=description, source=SOURCE, max_new_tokens=128,
        make=lambda tok, length, hay, rng: make_niah(spec, tok, length, hay, rng), default_haystack=haystack))


_register("niah_single_1", "one needle, a 7-digit number (RULER: noise haystack)", NeedleSpec(), "noise")
_register("niah_single_2", "one needle, a 7-digit number (RULER: essay haystack)", NeedleSpec(), "real_prose")
_register("niah_single_3", "one needle, a UUID (RULER: essay haystack)", NeedleSpec(type_v="uuids"), "real_prose")
_register("niah_multikey_1", "the needle among 3 needles of other keys (RULER: essay haystack)",
          NeedleSpec(num_k=4), "real_prose")
_register("niah_multikey_2", "one needle in a haystack of distractor needles", NeedleSpec(), "needles")
_register("niah_multikey_3", "one needle, UUID key and value, in distractor needles",
          NeedleSpec(type_k="uuids", type_v="uuids"), "needles")
_register("niah_multivalue", "four values under one key, all asked for (RULER: essay haystack)",
          NeedleSpec(num_v=4), "real_prose")
_register("niah_multiquery", "four keys, all asked for (RULER: essay haystack)", NeedleSpec(num_q=4), "real_prose")
