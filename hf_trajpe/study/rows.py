"""The rows a study run trains on, saved once per study (or per task) and loaded by every worker:
a :class:`~hf_trajpe.training.RunData` as plain tensors (ids, the optional loss mask, validation rows), so a
file says what it holds and a worker needs no suite-specific trainer."""

from __future__ import annotations

from pathlib import Path

import torch

from ..training import RunData

__all__ = ["ROWS", "load_rows", "save_rows"]

ROWS = "train_rows.pt"  # beside the data it was built from


def save_rows(path: str | Path, data: RunData) -> None:
    torch.save({"ids": data.train, "loss_mask": data.loss_mask, "eval": dict(data.eval_blocks),
                "types": list(data.content_types)}, path)


def load_rows(path: str | Path) -> RunData:
    saved = torch.load(path, weights_only=True)
    return RunData(saved["ids"], saved["eval"], saved["types"], saved["loss_mask"])
