"""Training data of a run: content-type texts packed into blocks, a deterministic order of micro-batches
that a resumed run reproduces exactly, and deterministic masking for masked LM.

Order: epoch ``e`` is a permutation of all blocks drawn from ``torch.Generator().manual_seed(seed + e)``;
micro-batch ``j`` of process ``r`` (of ``W``) holds blocks ``perm[(j*W + r)*B : (j*W + r + 1)*B]``.
So the ``k``-th micro-batch of a process is a function of ``(seed, k, r, W, B)`` only: resuming after
``k`` micro-batches starts at ``k`` without loading the skipped ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import DataConfig

__all__ = ["RunData", "batch_indices", "build_run_data", "iterate_batches", "mask_tokens"]


@dataclass
class RunData:
    train: torch.Tensor  # [N, L] token ids of the training blocks (all types, concatenated)
    eval_blocks: dict[str, torch.Tensor]  # type -> [n, L] validation blocks
    content_types: list[str]


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


def build_run_data(cfg: DataConfig, tokenizer, mode: str) -> RunData:
    """Training blocks of every type (``data.train`` documents each, the saved split if ``data.path``)
    and up to ``data.eval_blocks`` validation blocks per type."""
    from ..data import pack_blocks
    from ..data.registry import names

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
                    start: int = 0) -> Iterator[tuple[int, torch.Tensor]]:
    """``(k, blocks [B, L])`` for micro-batches ``start, start + 1, ...`` (endless)."""
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


def mask_tokens(input_ids: torch.Tensor, tokenizer, probability: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking (of the chosen positions: 80% ``[MASK]``, 10% a random token, 10% unchanged), drawn
    from ``seed`` so a resumed run masks exactly as the uninterrupted one. Returns ``(inputs, labels)``."""
    g = torch.Generator().manual_seed(seed)
    special = torch.isin(input_ids, torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=input_ids.dtype))
    chosen = (torch.rand(input_ids.shape, generator=g) < probability) & ~special
    labels = torch.where(chosen, input_ids, -100)
    inputs = input_ids.clone()
    u = torch.rand(input_ids.shape, generator=g)
    inputs[chosen & (u < 0.8)] = tokenizer.mask_token_id
    rand = chosen & (u >= 0.8) & (u < 0.9)
    inputs[rand] = torch.randint(len(tokenizer), input_ids.shape, generator=g)[rand]
    return inputs, labels
