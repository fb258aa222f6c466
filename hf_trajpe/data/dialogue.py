"""``dialogue_structure``: alternating speakers, question and answer turns (docs/spec.md, section 3).

Two speakers alternate strictly, one turn per line, ``Speaker: utterance``. The pair of tags is
chosen per example: two first names (``Maya:`` / ``Omar:``), ``Q:`` / ``A:``, ``User:`` /
``Assistant:`` or ``Customer:`` / ``Agent:``. Turns come from question/answer templates whose
slots (objects, places, numbers, names, days) are filled at random, so no two dialogues repeat::

    Maya: Where did you leave the copper lantern?
    Omar: Next to the old piano, I think.
    Maya: How many tickets do we still need?
    Omar: About 14, maybe more.
"""

from __future__ import annotations

import random
from functools import partial

from ._words import ADJECTIVES, DAYS, NAMES, NOUNS, PLACES, UNITS, VERBS
from .registry import ContentType, generated_splits, register

__all__ = ["TURNS", "generate"]

# (question, answer) templates; slots: {a} adjective, {n} noun, {m} second noun, {v} verb,
# {p} place, {k} number, {u} unit, {d} day, {x} a third person's name
TURNS = (
    ("Where did you leave the {a} {n}?", "Next to the {m}, I think."),
    ("Where did you leave the {a} {n}?", "I put it in the {m} at {p}."),
    ("How many {u} do we still need?", "About {k}, maybe more."),
    ("How many {u} do we still need?", "Only {k}, if {x} brings the rest."),
    ("Can you {v} the {n} before {d}?", "Yes, I will {v} it on {d} morning."),
    ("Can you {v} the {n} before {d}?", "Not before {d}; the {m} is broken."),
    ("Who is going to {p} this week?", "{x} is, with the {a} {n}."),
    ("Why is the {n} so {a}?", "Because someone left it near the {m}."),
    ("Did {x} call about the {u}?", "Yes, {x} said {k} of them arrived."),
    ("What should I do with the {a} {m}?", "{v} it and put it next to the {n}."),
    ("Is the {n} ready?", "Almost. I still have to {v} the {m}."),
    ("When does the train to {p} leave?", "At {h}:{mm}, from platform {k}."),
    ("How much was the {n}?", "{k}.{c} for two of them."),
    ("Have you seen my {a} {n}?", "It was on the {m} this morning."),
    ("Should we {v} the {m} first?", "No, the {n} comes first."),
    ("What did {x} say about {p}?", "That the {a} {n} there is worth a visit."),
    ("Do you need help with the {n}?", "Please, could you {v} the {m}?"),
    ("Are you coming on {d}?", "Yes, and I will bring {k} {u}."),
)


def _fill(template: str, rng: random.Random) -> str:
    slots = dict(a=rng.choice(ADJECTIVES), n=rng.choice(NOUNS), m=rng.choice(NOUNS), v=rng.choice(VERBS),
                 p=rng.choice(PLACES), k=rng.randint(2, 60), u=rng.choice(UNITS), d=rng.choice(DAYS),
                 x=rng.choice(NAMES), h=rng.randint(5, 22), mm=f"{rng.randrange(0, 60, 5):02d}",
                 c=f"{rng.randrange(0, 100, 5):02d}")
    text = template.format(**slots)
    return text[0].upper() + text[1:]


def _tags(rng: random.Random) -> tuple[str, str]:
    kind = rng.choice(("names", "names", "qa", "user", "shop"))
    if kind == "names":
        return tuple(rng.sample(NAMES, 2))
    return {"qa": ("Q", "A"), "user": ("User", "Assistant"), "shop": ("Customer", "Agent")}[kind]


def generate(rng: random.Random, min_chars: int) -> tuple[str, str]:
    asker, answerer = _tags(rng)
    lines: list[str] = []
    while len("\n".join(lines)) < min_chars:
        question, answer = rng.choice(TURNS)
        lines += [f"{asker}: {_fill(question, rng)}", f"{answerer}: {_fill(answer, rng)}"]
    return "\n".join(lines), f"generated:dialogue/{asker}|{answerer}"


register(ContentType(
    name="dialogue_structure",
    description="two speakers alternating strictly, question and answer turns from filled templates",
    origin="generated",
    make_splits=partial(generated_splits, "dialogue_structure", generate),
))
