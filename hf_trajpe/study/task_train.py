"""Training on a task (docs/tasks.md) through the study's ``train_run`` and :mod:`hf_trajpe.training`'s
``Trainer``, with the loss on the answer tokens only (or on every token: ``data.loss: all``).

One example per row, right-padded to the task's training length. The trainer draws rows of one
``[N, L]`` tensor, so which tokens carry the loss travels inside that tensor: a token with the loss gets
``LOSS_FLAG`` added to its id (:func:`training_rows`), and :class:`AnswerTrainer` splits ids and labels
again (:func:`split_flags`); labels are -100 elsewhere. Padding comes after the text, so with a causal
model it changes no real token's output, and no attention mask is needed (as in the content study).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..training import RunData
from ..training.trainer import Trainer

__all__ = ["LOSS_FLAG", "LOSSES", "AnswerTrainer", "split_flags", "task_trainer", "training_rows"]

LOSS_FLAG = 1 << 32  # above any vocabulary
LOSSES = ("answers", "all")


def training_rows(encoded: Sequence[tuple[list[int], list[bool]]], length: int, pad_id: int,
                  loss: str = "answers") -> torch.Tensor:
    """``[N, length]`` ids (right-padded with ``pad_id``) with ``LOSS_FLAG`` on the tokens that carry the
    loss: the answer tokens (``loss="answers"``) or every token of the text but the first (``"all"``)."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    rows = torch.full((len(encoded), length), pad_id, dtype=torch.long)
    for i, (ids, mask) in enumerate(encoded):
        if len(ids) > length:
            raise ValueError(f"row {i} has {len(ids)} tokens, more than the training length {length}")
        rows[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        flags = torch.tensor(mask, dtype=torch.bool) if loss == "answers" else torch.ones(len(ids), dtype=torch.bool)
        flags[0] = False  # nothing precedes the first token
        rows[i, :len(ids)] += flags.long() * LOSS_FLAG
    return rows


def split_flags(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input ids, labels)`` of flagged rows: labels are the ids where flagged, -100 elsewhere."""
    flagged = blocks >= LOSS_FLAG
    ids = torch.where(flagged, blocks - LOSS_FLAG, blocks)
    return ids, torch.where(flagged, ids, torch.full_like(ids, -100))


class AnswerTrainer(Trainer):
    """The recipe's ``Trainer`` with the loss on the flagged tokens of each row (causal LM only)."""

    def _forward(self, blocks: torch.Tensor, k: int) -> torch.Tensor:
        ids, labels = split_flags(blocks)
        device = self.accelerator.device
        return self.model(input_ids=ids.to(device), labels=labels.to(device), use_cache=False).loss


def task_trainer(cfg, blocks_path: str, log) -> AnswerTrainer:
    """The trainer of one task run (the ``trainer_factory`` of :func:`hf_trajpe.study.train.train_run`):
    ``blocks_path`` holds ``{"task", "train" (flagged rows), "eval" (plain validation rows)}``."""
    saved = torch.load(blocks_path, weights_only=True)
    data = RunData(saved["train"], {saved["task"]: saved["eval"]}, [saved["task"]])
    return AnswerTrainer(cfg, data=data, log=log)
