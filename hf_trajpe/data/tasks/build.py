"""Build a task as a ``datasets.DatasetDict``, and tokenize its rows with the answer-token mask.

Columns: ``text``, ``answer_spans`` (``[[start, end], ...]`` character spans of the answers) and
``source``. Splits: the task's test splits (``test``, then its OOD splits), ``validation``, ``train``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .registry import get_task

__all__ = ["DEFAULT_TASK_SIZES", "build_task", "encode_answers", "encode_rows"]

DEFAULT_TASK_SIZES: dict[str, int] = {"train": 2000, "validation": 100, "test": 200}


def _features():
    import datasets

    return datasets.Features({"text": datasets.Value("string"),
                              "answer_spans": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
                              "source": datasets.Value("string")})


def build_task(name: str, train: int = DEFAULT_TASK_SIZES["train"],
               validation: int = DEFAULT_TASK_SIZES["validation"], test: int = DEFAULT_TASK_SIZES["test"],
               seed: int = 0, train_seed: int | None = None, **options):
    """One task as a ``datasets.DatasetDict``; ``test`` is the size of every test split, ``options`` the
    task's (see its module, or ``get_task(name).defaults``). Deterministic given the seeds, sizes and options.
    ``train_seed``: validation and train drawn from ``(seed, train_seed)``, the test splits still from ``seed``
    alone (a study's model seed: new training data per seed, the same test examples for every model)."""
    import datasets

    task = get_task(name)
    sizes = {"train": train, "validation": validation, "test": test}
    if any(v < 0 for v in sizes.values()):
        raise ValueError(f"split sizes must be >= 0, got {sizes}")
    stream = {} if train_seed is None else {"train_seed": int(train_seed)}
    rows = task.make_splits(sizes, seed, **stream, **task.check_options(options))
    feats = _features()
    return datasets.DatasetDict({
        split: datasets.Dataset.from_dict({k: [r[k] for r in rows[split]] for k in feats}, features=feats)
        for split in task.splits})


def encode_answers(text: str, spans: Sequence[Sequence[int]], tokenizer) -> tuple[list[int], list[bool]]:
    """``(token ids, answer mask)`` of one row: the text is cut at the span boundaries and each piece
    tokenized on its own (no special tokens), so every token is either context or answer. With the byte
    tokenizer every ASCII character is one token and the mask equals the character spans."""
    return encode_rows([text], [spans], tokenizer)[0]


def encode_rows(texts: Sequence[str], spans: Sequence[Sequence[Sequence[int]]],
                tokenizer) -> list[tuple[list[int], list[bool]]]:
    """:func:`encode_answers` of many rows, with one tokenizer call."""
    pieces, owners = [], []
    for row, (text, row_spans) in enumerate(zip(texts, spans, strict=True)):
        cut = 0
        for start, end in sorted((int(s), int(e)) for s, e in row_spans):
            if not cut <= start < end <= len(text):
                raise ValueError(f"row {row}: answer span [{start}, {end}) is empty, overlaps another or lies "
                                 f"outside the text ({len(text)} characters)")
            if start > cut:
                pieces.append(text[cut:start])
                owners.append((row, False))
            pieces.append(text[start:end])
            owners.append((row, True))
            cut = end
        if cut < len(text):
            pieces.append(text[cut:])
            owners.append((row, False))
    ids = tokenizer(pieces, add_special_tokens=False, verbose=False)["input_ids"] if pieces else []
    out: list[tuple[list[int], list[bool]]] = [([], []) for _ in texts]
    for (row, answer), piece in zip(owners, ids, strict=True):
        out[row][0].extend(piece)
        out[row][1].extend([answer] * len(piece))
    return out
