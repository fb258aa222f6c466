"""The training rows of a task (docs/tasks.md): one example per row, right-padded to the task's training
length, with a loss mask beside the ids saying which tokens carry the loss: the answer tokens
(``data.loss: answers``) or every token of the text but the first (``all``). The recipe's ``Trainer``
takes the labels from the mask (:class:`~hf_trajpe.training.RunData`). Padding comes after the text, so with
a causal model it changes no real token's output, and no attention mask is needed (as in the content study).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["LOSSES", "training_rows"]

LOSSES = ("answers", "all")


def training_rows(encoded: Sequence[tuple[list[int], list[bool]]], length: int, pad_id: int,
                  loss: str = "answers") -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, loss mask)``, both ``[N, length]``: ids right-padded with ``pad_id``, the mask True on the
    tokens that carry the loss (never on padding, nor on a row's first token: nothing precedes it)."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    ids = torch.full((len(encoded), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), length), dtype=torch.bool)
    for i, (row, answers) in enumerate(encoded):
        if len(row) > length:
            raise ValueError(f"row {i} has {len(row)} tokens, more than the training length {length}")
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :len(row)] = (torch.tensor(answers, dtype=torch.bool) if loss == "answers"
                              else torch.ones(len(row), dtype=torch.bool))
        mask[i, 0] = False
    return ids, mask
