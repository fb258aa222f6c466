"""PoSE, positional skip-wise training (Zhu et al., ICLR 2024): fine-tune on short windows whose position ids
are split into chunks with random skips between them, so that over many windows every relative distance of a
longer target context is seen without ever running a sequence that long.

How the ids of one window of ``length`` tokens are drawn for a ``target_length`` (the reference code's
``train_preprocess_function_pose``, generalised from its two chunks to ``chunks``):

- chunk lengths: while ``k`` chunks are left for the ``R`` tokens not yet placed, the next chunk takes
  ``l ~ U{1, ..., ceil(R / k)}`` tokens; the last chunk takes the rest. With two chunks this is the
  reference's ``randint(1, (L + 1) // 2)`` for the first one.
- skips: the first chunk starts at 0 (``u_0 = 0``, as the reference does since its October 2023 revision);
  chunk ``i`` is shifted by ``u_i ~ U{u_(i-1), ..., target_length - length}``: skips never decrease, so the
  ids rise strictly and the last id is below ``target_length``.
- chunk ``i`` holds ids ``st_i + u_i, ..., st_i + l_i - 1 + u_i`` (``st_i``: the tokens before it).

The tokens of the window stay contiguous text; only their ids skip (the reference also takes the later
chunk's tokens from further on in a longer document). The trainer draws each micro-batch's ids from a
generator seeded by ``(seed, process index, micro-batch index)`` (:func:`pose_generator`), never from a
running RNG, so a resumed run draws the ids of the uninterrupted one and every process draws its own.

Patched models place tokens themselves (and refuse ``position_ids`` that are not ranks): the trainer hands
them the skips (ids minus ranks) through their patch state, added to whatever positions the patch computes
(ranks, or trajectory positions). A model trained as built (``encoding: null``) gets ``position_ids`` and an
all-ones attention mask, so transformers does not read the skips as packed sequences.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = ["POSE_CONTRIBUTIONS", "PoSECollator", "check_pose_model", "pose_batch", "pose_generator",
           "pose_position_ids", "pose_skips", "skipped_positions"]

#: what a scheme must contribute for PoSE to mean something: positions that the model reads and can adapt to
POSE_CONTRIBUTIONS = ("rotary", "additive")
#: why PoSE is refused for the other contributions (the reason in the error)
_REFUSED = {
    "bias": "its linear bias on distances has no position-dependent parameters to adapt, so skipped ids "
            "only add a penalty between chunks",
    "score": "its positions are counted from the content by each layer, so position ids are never read",
    "nothing": "it reads no positions at all",
    "remap": "a remap (Self-Extend, ReRoPE, DCA, STRING) maps relative positions at read time and is meant to "
             "be applied without training; fine-tune with PoSE on rope (with its rope_parameters) and apply the "
             "remap to the tuned model afterwards",
}


def pose_position_ids(length: int, target_length: int, chunks: int = 2,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """The position ids ``[length]`` (int64) of one training window (module docstring); ``arange(length)``
    when ``target_length == length``."""
    if length < 1:
        raise ValueError(f"a window needs at least one token, got length {length}")
    if target_length < length:
        raise ValueError(f"target_length ({target_length}) must be >= the window length ({length})")
    if not 1 <= chunks <= length:
        raise ValueError(f"chunks must lie in [1, {length}] (one token per chunk at least), got {chunks}")
    ids = torch.arange(length, dtype=torch.int64)
    room = target_length - length
    if room == 0:
        return ids
    lengths, left = [], length
    for k in range(chunks, 1, -1):
        size = _uniform(1, -(-left // k), generator)
        lengths.append(size)
        left -= size
    lengths.append(left)
    skips, last = [0], 0
    for _ in range(chunks - 1):
        last = _uniform(last, room, generator)
        skips.append(last)
    return ids + torch.repeat_interleave(torch.tensor(skips, dtype=torch.int64), torch.tensor(lengths))


def _uniform(low: int, high: int, generator: torch.Generator | None) -> int:
    """A uniform integer in ``[low, high]``, both ends included."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def pose_generator(seed: int, rank: int, index: int) -> torch.Generator:
    """The generator of micro-batch ``index`` of process ``rank``: a function of the three only."""
    digest = hashlib.blake2b(f"pose:{seed}:{rank}:{index}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


def pose_batch(batch: int, length: int, target_length: int, chunks: int, generator: torch.Generator) -> torch.Tensor:
    """``[batch, length]`` ids, row after row from ``generator``."""
    return torch.stack([pose_position_ids(length, target_length, chunks, generator) for _ in range(batch)])


def pose_skips(position_ids: torch.Tensor) -> torch.Tensor:
    """What the ids add to the ranks ``0, 1, ...`` of each row."""
    return position_ids - torch.arange(position_ids.shape[-1], device=position_ids.device)


def _patch_states(handle) -> list:
    return [h.state for h in getattr(handle, "handles", (handle,))]


def check_pose_model(model, handle, target_length: int) -> None:
    """Refuse PoSE where position ids mean nothing: by what the model's schemes contribute (ALiBi's bias,
    CoPE's contextual positions, NoPE; a layer map needs one scheme that reads them), and where a learned
    table is shorter than ``target_length``."""
    from ..patching.families import adapter_for
    from ..patching.schemes import get_scheme

    if handle is not None:
        plans = [st.plan for st in _patch_states(handle)]
        names = [(p.scheme, p.max_positions) for p in plans]
    else:  # the model as built: its own scheme, and its own table's rows where it reads one
        native = adapter_for(model).native
        rows = getattr(model.config, "max_position_embeddings", None) if get_scheme(native).reads_table else None
        names = [(native, rows)]
    for name, limit in names:
        if limit is not None and target_length > limit:
            raise ValueError(f"pose.target_length ({target_length}) is past the position limit of the {name!r} "
                             f"encoding ({limit} positions); lower pose.target_length")
    readers = [n for n, _ in names if get_scheme(n).contributes in POSE_CONTRIBUTIONS]
    if not readers:  # (a layer map with one reader trains it; the other layers run at the same ids)
        name = names[0][0]
        contributes = get_scheme(name).contributes
        raise ValueError(f"pose: PoSE trains on skipped position ids, and the {name!r} encoding "
                         f"({contributes}) gets nothing from them: {_REFUSED[contributes]}. Remove pose, or "
                         "train an encoding that reads position ids (rope, trajectory, sinusoidal, learned)")


@contextlib.contextmanager
def skipped_positions(model, handle, position_ids: torch.Tensor) -> Iterator[dict]:
    """Inside: the forward runs at ``position_ids`` ``[b, n]``. Yields the keyword arguments to pass to the
    forward (none for a patched model, whose patch states carry the skips)."""
    if handle is None:
        yield {"position_ids": position_ids, "attention_mask": torch.ones_like(position_ids)}
        return
    states = _patch_states(handle)
    skips = pose_skips(position_ids)
    for st in states:
        st.position_skips = skips
    try:
        yield {}
    finally:
        for st in states:
            st.position_skips = None


class PoSECollator:
    """A data collator for transformers' ``Trainer`` and TRL's ``SFTTrainer`` that adds PoSE ``position_ids``
    to the batches of ``base`` (any collator that returns ``input_ids``).

    Batch ``i`` of a process draws from :func:`pose_generator` ``(seed, rank, i)`` (data loader workers
    included): reproducible, and distinct per process; a resumed ``Trainer`` counts batches from 0 again.
    The model must read ``position_ids`` (a model as loaded: Llama, Qwen, Mistral and the other rotary
    families); a model patched by hf_trajpe places tokens itself, refuses such ids, and is trained with
    ``pose`` in the experiment config instead. Padded rows keep their ids (the loss ignores the padding).
    """

    def __init__(self, base, target_length: int, chunks: int = 2, seed: int = 0, rank: int | None = None) -> None:
        if chunks < 2:
            raise ValueError(f"chunks must be >= 2 (one chunk never skips), got {chunks}")
        self.base, self.target_length, self.chunks, self.seed = base, target_length, chunks, seed
        self.rank = rank
        self.calls = 0

    def _rank(self) -> int:
        if self.rank is not None:
            return self.rank
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    def __call__(self, features) -> Mapping[str, Any]:
        batch = self.base(features)
        ids = batch["input_ids"]
        b, n = ids.shape
        if n > self.target_length:
            raise ValueError(f"a batch of {n} tokens is longer than target_length ({self.target_length}); "
                             "raise target_length or truncate the examples")
        worker = torch.utils.data.get_worker_info()  # each loader worker collates every num_workers-th batch
        index = self.calls if worker is None else self.calls * worker.num_workers + worker.id
        generator = pose_generator(self.seed, self._rank(), index)
        self.calls += 1
        batch["position_ids"] = pose_batch(b, n, self.target_length, self.chunks, generator).to(ids.device)
        if batch.get("attention_mask") is None:  # without a mask transformers reads jumps as packed sequences
            batch["attention_mask"] = torch.ones_like(ids)
        return batch
