"""Training data of a run: content-type texts packed into blocks, and a deterministic order of
micro-batches that a resumed run reproduces exactly (masking for masked LM: :mod:`hf_trajpe.evaluation.masking`).

Order ``epochs``: epoch ``e`` is a permutation of all blocks drawn from ``torch.Generator().manual_seed(seed + e)``;
micro-batch ``j`` of process ``r`` (of ``W``) holds blocks ``perm[(j*W + r)*B : (j*W + r + 1)*B]``.
So the ``k``-th micro-batch of a process is a function of ``(seed, k, r, W, B)`` only: resuming after
``k`` micro-batches starts at ``k`` without loading the skipped ones.

Order ``random``: micro-batch ``k`` draws ``W*B`` block indices with replacement from one generator seeded
with ``seed`` (its ``k``-th draw), process ``r`` takes the ``r``-th ``B`` of them; a resumed run replays the
``k`` earlier draws (indices only).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from ..evaluation.masking import mask_tokens
from .config import DataConfig

__all__ = ["RunData", "batch_indices", "build_run_data", "iterate_batches", "iterate_rows", "mask_tokens"]


@dataclass
class RunData:
    """The rows a run trains on. ``loss_mask`` (``[N, L]`` bool, optional) says which tokens carry the loss
    (labels elsewhere are -100): answer tokens of a task, right padding left out; ``None``: every token."""

    train: torch.Tensor  # [N, L] token ids of the training blocks (all types, concatenated)
    eval_blocks: dict[str, torch.Tensor]  # type -> [n, L] validation blocks
    content_types: list[str]
    loss_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.loss_mask is not None and (self.loss_mask.shape != self.train.shape
                                           or self.loss_mask.dtype != torch.bool):
            raise ValueError(f"loss_mask must be a bool tensor shaped like the rows {tuple(self.train.shape)}, got "
                             f"{self.loss_mask.dtype} {tuple(self.loss_mask.shape)}")


def _load_splits(cfg: DataConfig, types: list[str]) -> dict:
    from ..data import build_dataset, load_datasets

    if cfg.path is not None:
        path = Path(cfg.path).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"data.path {cfg.path!r} does not exist; build it with "
                                    f"`hf-trajpe data build --out {cfg.path}` or remove data.path to generate data")
        try:
            return load_datasets(path, types)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"data.path {cfg.path!r}: {err}") from None
    return {t: build_dataset(t, train=cfg.train, validation=cfg.validation, test=cfg.test, seed=cfg.seed,
                             min_chars=cfg.min_chars) for t in types}


#: the content type of a run's own text (``data.files``)
FILES_TYPE = "files"


def _files_run_data(cfg: DataConfig, tokenizer, mode: str) -> RunData:
    """``data.files`` joined in order and packed into blocks; the last ``eval_blocks`` blocks held out."""
    from ..data import pack_blocks
    from ..data.text_files import text_files

    paths = text_files(cfg.files)
    if not paths:
        raise FileNotFoundError(f"data.files {cfg.files!r} holds no text file: give files of text, or folders of them")
    text = "\n\n".join(p.read_text(encoding="utf-8", errors="replace").strip() for p in paths)
    blocks = torch.tensor(pack_blocks(text, tokenizer, cfg.block_size, mode=mode)["input_ids"], dtype=torch.long)
    if blocks.shape[0] <= cfg.eval_blocks:
        raise ValueError(f"data.files: the text makes {blocks.shape[0]} block(s) of {cfg.block_size} tokens, and "
                         f"{cfg.eval_blocks} are held out for the evaluations (data.eval_blocks); give more text, or "
                         "lower data.block_size or data.eval_blocks")
    held = blocks.shape[0] - cfg.eval_blocks
    return RunData(blocks[:held], {FILES_TYPE: blocks[held:]} if cfg.eval_blocks else {}, [FILES_TYPE])


def build_run_data(cfg: DataConfig, tokenizer, mode: str) -> RunData:
    """Training blocks of every type (``data.train`` documents each, the saved split if ``data.path``;
    ``data.balance``: the same number from every type) and up to ``data.eval_blocks`` validation blocks
    per type; with ``data.files``, that text alone (:func:`_files_run_data`)."""
    from ..data import pack_blocks
    from ..data.registry import names

    if cfg.files is not None:
        return _files_run_data(cfg, tokenizer, mode)
    types = list(cfg.content_types or names())
    splits = _load_splits(cfg, types)
    train, evals = [], {}
    for t in types:
        dd = splits[t]
        blocks = pack_blocks(dd["train"], tokenizer, cfg.block_size, mode=mode)
        if blocks.num_rows == 0:
            raise ValueError(f"content type {t}: the train split is shorter than one block of {cfg.block_size} "
                             "tokens; raise data.train")
        train.append(torch.tensor(blocks["input_ids"], dtype=torch.long))
        if "validation" in dd and dd["validation"].num_rows:
            val = pack_blocks(dd["validation"], tokenizer, cfg.block_size, mode=mode, max_blocks=cfg.eval_blocks)
            if val.num_rows:
                evals[t] = torch.tensor(val["input_ids"], dtype=torch.long)
    if cfg.balance:
        n = min(len(b) for b in train)
        train = [b[:n] for b in train]
    return RunData(torch.cat(train), evals, types)


def batches_per_epoch(n_blocks: int, batch_size: int, world: int) -> int:
    per = n_blocks // (batch_size * world)
    if per == 0:
        raise ValueError(f"{n_blocks} training blocks are fewer than one step's worth "
                         f"({batch_size} per process x {world} processes); add data or lower train.batch_size")
    return per


def batch_indices(k: int, n_blocks: int, batch_size: int, rank: int, world: int, seed: int) -> torch.Tensor:
    """Block indices of micro-batch ``k`` (counted from 0 over all epochs) of process ``rank``."""
    per = batches_per_epoch(n_blocks, batch_size, world)
    epoch, j = divmod(k, per)
    perm = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed + epoch))
    start = (j * world + rank) * batch_size
    return perm[start:start + batch_size]


def iterate_batches(train: torch.Tensor, batch_size: int, rank: int, world: int, seed: int,
                    start: int = 0, order: str = "epochs") -> Iterator[tuple[int, torch.Tensor]]:
    """``(k, blocks [B, L])`` for micro-batches ``start, start + 1, ...`` (endless) in ``order``
    (``epochs`` or ``random``, see the module docstring)."""
    if order == "random":
        yield from _random_batches(train, batch_size, rank, world, seed, start)
        return
    n = train.shape[0]
    per = batches_per_epoch(n, batch_size, world)
    k = start
    while True:
        epoch, j = divmod(k, per)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
        while j < per:
            s = (j * world + rank) * batch_size
            yield k, train[perm[s:s + batch_size]]
            j += 1
            k += 1


def iterate_rows(data: RunData, batch_size: int, rank: int, world: int, seed: int, start: int = 0,
                 order: str = "epochs") -> Iterator[tuple[int, torch.Tensor, torch.Tensor | None]]:
    """``(k, ids [B, L], loss mask [B, L] or None)``: :func:`iterate_batches` over the rows of ``data``, the
    mask drawn with the same indices (the batches depend on the number of rows only)."""
    rows = torch.arange(data.train.shape[0])
    for k, idx in iterate_batches(rows, batch_size, rank, world, seed, start=start, order=order):
        yield k, data.train[idx], (data.loss_mask[idx] if data.loss_mask is not None else None)


def _random_batches(train: torch.Tensor, batch_size: int, rank: int, world: int, seed: int,
                    start: int) -> Iterator[tuple[int, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    draw = batch_size * world
    for _ in range(start):  # replay the draws of the micro-batches already trained
        torch.randint(0, train.shape[0], (draw,), generator=gen)
    k = start
    while True:
        idx = torch.randint(0, train.shape[0], (draw,), generator=gen)
        yield k, train[idx[rank * batch_size:(rank + 1) * batch_size]]
        k += 1
