"""A RULER task and the registry of tasks: one small module per kind of task registers its variants.

A task makes one :class:`Sample` from ``(tokenizer, length, haystack, rng)``: the prompt (RULER's template
with its answer prefix, the haystack fitted to ``length`` tokens), the references the score looks for, and
how many tokens to generate (RULER's ``tokens_to_generate``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .haystacks import Haystack

__all__ = ["RULER_TASKS", "RulerTask", "Sample", "get_task", "register_ruler_task", "task_names"]


@dataclass
class Sample:
    task: str
    haystack: str
    length: int  # the target
    index: int
    prompt: str
    answers: list[str]
    tokens: int  # tokens of the prompt
    max_new_tokens: int
    metric: str
    extra: dict = field(default_factory=dict)  # what else a task wants to record (needle depths, ...)


#: (tokenizer, target length, haystack or None, rng) -> (prompt, answers, prompt tokens, extra)
Make = Callable[[object, int, "Haystack | None", random.Random], tuple[str, list[str], int, dict]]


@dataclass(frozen=True)
class RulerTask:
    name: str
    description: str
    source: str  # the RULER file the template and generator follow
    max_new_tokens: int
    make: Make
    metric: str = "string_match_all"
    default_haystack: str | None = "noise"  # RULER's own haystack here; None: the task is its own haystack

    @property
    def uses_haystack(self) -> bool:
        return self.default_haystack is not None

    def sample(self, tokenizer, length: int, haystack: Haystack | None, index: int, seed: int) -> Sample:
        """Sample ``index`` at ``length`` tokens: a function of (task, haystack, length, index, seed) only."""
        label = haystack.name if haystack is not None else "own"
        rng = random.Random(f"hf_trajpe.ruler:{self.name}:{label}:{length}:{index}:{seed}")
        prompt, answers, tokens, extra = self.make(tokenizer, length, haystack if self.uses_haystack else None, rng)
        return Sample(self.name, label, length, index, prompt, answers, tokens, self.max_new_tokens, self.metric,
                      extra)


RULER_TASKS: dict[str, RulerTask] = {}


def register_ruler_task(task: RulerTask) -> RulerTask:
    if task.name in RULER_TASKS:
        raise ValueError(f"RULER task {task.name!r} is registered twice")
    RULER_TASKS[task.name] = task
    return task


def task_names() -> list[str]:
    return list(RULER_TASKS)


def get_task(name: str) -> RulerTask:
    try:
        return RULER_TASKS[name]
    except KeyError:
        raise ValueError(f"unknown RULER task {name!r}; known: {', '.join(RULER_TASKS)}") from None
