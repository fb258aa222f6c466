"""The registry of tasks with known answers (docs/tasks.md), beside the content types' registry.

A task is a :class:`Task`: its name, a one-line description, its source paper, its test splits (each
with what it measures: ``test`` in distribution, ``test_*`` out of distribution), its default options
and ``make_splits(sizes, seed, **options)``, which returns ``{split: [row, ...]}``. A row is
``{"text", "answer_spans", "source"}``: ``answer_spans`` lists the ``[start, end)`` character spans of
the answers in ``text`` (what a model must predict; every other character is context).

Tasks live in their own registry, not in ``CONTENT_TYPE_REGISTRY``: the content types' registry
feeds the content-type study's training mix and its defaults (``hf_trajpe.data.registry.names``),
which must keep meaning the seven types of docs/spec.md, section 3.

Splits are drawn like the content types' (``hf_trajpe.data.registry.generated_splits``): one seeded
stream per task, the test splits first (in the task's order), then validation, then train, every
text unique across all splits. So a test split depends only on the seed, the test size and the
options, never on the train size. With a ``train_seed``, validation and train come from a second stream
(``seed`` and ``train_seed``): a study draws new training data per model seed and scores every model on
the same test splits. A test split can be :class:`Matched` to an earlier one (the same mix of answers).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..registry import seeded_rng

__all__ = ["TASK_REGISTRY", "Matched", "Task", "get_task", "register_task", "task_names", "task_splits"]

Row = dict  # {"text": str, "answer_spans": [[start, end], ...], "source": str}
Example = tuple[str, list[list[int]], str]  # (text, answer_spans, source)


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    paper: str  # where the task comes from
    test_splits: dict[str, str]  # split -> what it measures; "test" is in distribution, the others OOD
    make_splits: Callable[..., dict[str, list[Row]]]
    defaults: dict = field(default_factory=dict)  # the options of make_splits and their defaults

    @property
    def ood_splits(self) -> list[str]:
        return [s for s in self.test_splits if s != "test"]

    @property
    def splits(self) -> list[str]:
        """Generation order: the test splits, then validation, then train."""
        return [*self.test_splits, "validation", "train"]

    def check_options(self, options: Mapping) -> dict:
        """``options`` over the defaults; an unknown option raises ``ValueError`` naming the known ones."""
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ValueError(f"task {self.name}: unknown option(s) {unknown}; options: {sorted(self.defaults)}")
        return {**self.defaults, **options}


TASK_REGISTRY: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    if task.name in TASK_REGISTRY:
        raise ValueError(f"task {task.name!r} is registered twice")
    if next(iter(task.test_splits), None) != "test":
        raise ValueError(f"task {task.name!r}: the first test split must be 'test' (in distribution)")
    TASK_REGISTRY[task.name] = task
    return task


def task_names() -> list[str]:
    return list(TASK_REGISTRY)


def get_task(name: str) -> Task:
    try:
        return TASK_REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {task_names()}") from None


@dataclass(frozen=True)
class Matched:
    """A test split whose mix of ``key`` (say, the answer value) is that of the earlier split ``like``: rows
    of ``generate`` are drawn until each value has as many rows as in ``like`` (rows whose value is already
    full are dropped), so the split differs from ``like`` only in what ``generate`` changes."""

    generate: Callable[[random.Random], Example]
    like: str
    key: Callable[[Example], object]
    max_draws_per_row: int = 2000


def task_splits(name: str, generators: Mapping[str, Callable[[random.Random], Example] | Matched],
                sizes: Mapping[str, int], seed: int, train_seed: int | None = None) -> dict[str, list[Row]]:
    """Unique rows per split from ``generators[split](rng) -> (text, spans, source)``.

    ``generators`` maps each test split, in order, to its generator (or a :class:`Matched`), and ``"train"``
    to the generator of validation and train. ``sizes["test"]`` is the size of every test split (a
    :class:`Matched` split has the size of the split it matches). ``train_seed``: validation and train come
    from a stream of their own seeded by ``(seed, train_seed)`` (the test splits stay those of ``seed``, and
    no training text is a test text); ``None``: the one stream of ``seed`` continues after the test splits."""
    rng = seeded_rng(f"task:{name}", seed)
    seen: set[str] = set()
    out: dict[str, list[Row]] = {}
    order = [s for s in generators if s != "train"] + ["validation", "train"]
    for split in order:
        if split == "validation" and train_seed is not None:
            rng = seeded_rng(f"task:{name}:train", f"{seed}:{train_seed}")
        want = int(sizes.get("test" if split.startswith("test") else split, 0))
        spec = generators["train" if split == "validation" else split]
        if isinstance(spec, Matched):
            out[split] = _matched(name, split, spec, out, rng, seen)
            continue
        rows: list[Row] = []
        misses = 0
        while len(rows) < want:
            text, spans, source = spec(rng)
            if text in seen:
                misses += 1
                if misses > 100 + want:
                    raise RuntimeError(f"{name}/{split}: the generator keeps repeating itself ({misses} duplicates)")
                continue
            seen.add(text)
            rows.append({"text": text, "answer_spans": spans, "source": source})
        out[split] = rows
    return out


def _matched(name: str, split: str, spec: Matched, out: dict[str, list[Row]], rng: random.Random,
             seen: set[str]) -> list[Row]:
    if spec.like not in out:
        raise ValueError(f"{name}/{split}: matches split {spec.like!r}, which must come before it")
    quota: dict = {}
    for r in out[spec.like]:
        k = spec.key((r["text"], r["answer_spans"], r["source"]))
        quota[k] = quota.get(k, 0) + 1
    want = sum(quota.values())
    rows: list[Row] = []
    for _ in range(spec.max_draws_per_row * max(1, want)):
        if len(rows) == want:
            return rows
        example = spec.generate(rng)
        k = spec.key(example)
        if quota.get(k, 0) == 0 or example[0] in seen:
            continue
        quota[k] -= 1
        seen.add(example[0])
        rows.append({"text": example[0], "answer_spans": example[1], "source": example[2]})
    if len(rows) == want:
        return rows
    missing = {k: v for k, v in quota.items() if v}
    raise RuntimeError(f"{name}/{split}: could not draw rows with the mix of {spec.like!r}: still missing "
                       f"{missing} after {spec.max_draws_per_row * want} draws (make the test split smaller)")
