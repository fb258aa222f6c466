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
import multiprocessing
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

__all__ = ["POSE_CONTRIBUTIONS", "PoSECollator", "check_pose_encoding", "check_pose_model", "pose_batch",
           "pose_generator", "pose_position_ids", "pose_skips", "skipped_positions"]

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


def _refuse_schemes(schemes: list[tuple[str, str]], complete: bool) -> None:
    """Refuse PoSE for ``schemes``, ``(scheme name, where it runs)`` pairs: a remap, alone or in a layer map
    (the reason holds for its layers whatever the others train); and, when ``complete`` (every scheme of the
    model known), a model none of whose schemes reads position ids."""
    from ..patching.schemes import get_scheme

    for name, where in schemes:
        if get_scheme(name).contributes == "remap":
            raise _config_error(f"pose: PoSE trains on skipped position ids, and the {name!r} encoding (remap)"
                                f"{where} gets nothing from them: {_REFUSED['remap']}")
    if complete and schemes and not any(get_scheme(n).contributes in POSE_CONTRIBUTIONS for n, _ in schemes):
        name = schemes[0][0]  # (a layer map with one reader trains it; the other layers run at the same ids)
        contributes = get_scheme(name).contributes
        raise _config_error(f"pose: PoSE trains on skipped position ids, and the {name!r} encoding "
                            f"({contributes}) gets nothing from them: {_REFUSED[contributes]}. Remove pose, or "
                            "train an encoding that reads position ids (rope, trajectory, sinusoidal, learned)")


def _config_error(message: str) -> ValueError:
    """A :class:`~hf_trajpe.training.typed_config.ConfigError` (a ``ValueError``): the recipe prints it in one
    line and exits with status 2, as for any other wrong setting."""
    from .typed_config import ConfigError

    return ConfigError(message)


def check_pose_encoding(encoding) -> None:
    """Refuse PoSE from the config alone (``encoding``: the run's ``EncodingConfig``, or None), before the
    model or the data is built: a remap anywhere (a layer map's entries named), and an encoding whose
    schemes are all named and none reads position ids. What the model decides (``native``, trajectory on
    the model's own scheme, a learned table's length) is left to :func:`check_pose_model`."""
    from ..patching.schemes import SOURCES

    if encoding is None:
        return
    entries = ([(encoding.name, encoding.options, "")] if encoding.layers is None else
               [(e, {}, f" at encoding.layers.{sel}") if isinstance(e, str)
                else (e["name"], e.get("options") or {}, f" at encoding.layers.{sel}")
                for sel, e in encoding.layers.items()])
    schemes, complete = [], True
    for name, options, where in entries:
        source = SOURCES.get(name)
        scheme = options.get(source.base_option) if source is not None else None if name == "native" else name
        if scheme is None:  # the model's own scheme: known once the model is built
            complete = False
        else:
            schemes.append((scheme, where))
    _refuse_schemes(schemes, complete)


def _layers_of(plan) -> str:
    from ..patching.layers import describe_layers

    if plan.layers is None:
        return ""
    return f" on layer {plan.layers[0]}" if len(plan.layers) == 1 else f" on layers {describe_layers(plan.layers)}"


def check_pose_model(model, handle, target_length: int) -> None:
    """Refuse PoSE where position ids mean nothing: by what the model's schemes contribute (ALiBi's bias,
    CoPE's contextual positions, NoPE; a layer map needs one scheme that reads them), for a remap anywhere
    (its layers named), and where a learned table is shorter than ``target_length``. Raises a
    ``ConfigError`` (a ``ValueError``); the trainer calls it before the data is built."""
    from ..patching.families import adapter_for
    from ..patching.schemes import get_scheme

    if handle is not None:
        plans = [st.plan for st in _patch_states(handle)]
        names = [(p.scheme, p.max_positions, _layers_of(p)) for p in plans]
    else:  # the model as built: its own scheme, and its own table's rows where it reads one
        native = adapter_for(model).native
        rows = getattr(model.config, "max_position_embeddings", None) if get_scheme(native).reads_table else None
        names = [(native, rows, "")]
    for name, limit, _ in names:
        if limit is not None and target_length > limit:
            raise _config_error(f"pose.target_length ({target_length}) is past the position limit of the {name!r} "
                                f"encoding ({limit} positions); lower pose.target_length")
    _refuse_schemes([(name, where) for name, _, where in names], complete=True)


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


def _integer(value, name: str, low: int | None = None) -> int:
    """``value`` as an ``int`` (of at least ``low``): a clear ``ValueError`` naming ``name`` for a float, a
    string or a bool, not a ``TypeError`` from deep inside the sampler."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or (low is not None and number < low):
        raise ValueError(f"{name} must be an integer{f' >= {low}' if low is not None else ''}, got {value!r}")
    return number


class PoSECollator:
    """A data collator for transformers' ``Trainer`` and TRL's ``SFTTrainer`` that adds PoSE ``position_ids``
    to the batches of ``base`` (any collator that returns ``input_ids``).

    Batch ``i`` of a process draws from :func:`pose_generator` ``(seed, rank, i)``: reproducible, and distinct
    per process; a resumed ``Trainer`` counts batches from 0 again. ``i`` counts every batch the collator
    made, over epochs and data loaders, with or without loader workers: the workers of a ``DataLoader`` (which
    start each epoch from a copy of this collator) share its count, and worker ``w`` of ``W`` takes batches
    ``w, w + W, ...`` of the epoch, as the loader hands them out, so a loader with workers draws what one
    without draws. Exceptions, where the ids stay distinct but differ from a run without workers: persistent
    workers over epochs whose batch count is not a multiple of ``W``, an iterable dataset whose workers run out
    unevenly, and an epoch left early (its workers' prefetched batches are counted).
    The model must read ``position_ids`` (a model as loaded: Llama, Qwen, Mistral and the other rotary
    families); a model patched by hf_trajpe places tokens itself, refuses such ids, and is trained with
    ``pose`` in the experiment config instead. Padded rows keep their ids (the loss ignores the padding).
    """

    def __init__(self, base, target_length: int, chunks: int = 2, seed: int = 0, rank: int | None = None) -> None:
        self.base = base
        self.target_length = _integer(target_length, "target_length", 1)
        self.chunks = _integer(chunks, "chunks")
        if self.chunks < 2:
            raise ValueError(f"chunks must be >= 2 (one chunk never skips), got {chunks}")
        self.seed = _integer(seed, "seed")
        self.rank = None if rank is None else _integer(rank, "rank", 0)
        self._new_count()
        self._pass: int | None = None  # (in a loader worker) the loader pass it collates for, and its batches so far
        self._pass_calls = 0

    def _new_count(self, values: Iterable[int] = (0, 0, 0, 0, 0)) -> None:
        """The count shared with loader workers: ``[next index, whether a pass is open, its tag, its first
        index, the workers that joined it (a bit each)]``, in shared memory, with a lock (a spawn-context lock
        also works in forked workers)."""
        self._count = torch.tensor(list(values), dtype=torch.int64).share_memory_()
        self._lock = multiprocessing.get_context("spawn").Lock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if multiprocessing.context.get_spawning_popen() is None:  # a copy, not a worker: it counts on its own
            state["_count"], state["_lock"] = self._count.tolist(), None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._lock is None:
            self._new_count(state["_count"])

    def _rank(self) -> int:
        if self.rank is not None:
            return self.rank
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    def _index(self) -> int:
        """The index of this batch (class docstring). A loader pass is told by its workers' base seed, drawn
        afresh for each pass, or by a worker that joins it a second time (a fresh copy of the collator in a
        worker of an id that already joined: the torch RNG re-seeded before the epoch, the same base seed);
        its first batch opens it at the count so far."""
        worker = torch.utils.data.get_worker_info()
        with self._lock:
            count = self._count
            if worker is None:
                index = int(count[0])
            else:
                tag, bit = worker.seed - worker.id, 1 << worker.id if worker.id < 63 else 0
                fresh = self._pass != tag  # this copy's first batch of the pass
                if fresh:
                    self._pass, self._pass_calls = tag, 0
                if not int(count[1]) or int(count[2]) != tag or (fresh and int(count[4]) & bit):
                    count[1], count[2], count[3], count[4] = 1, tag, int(count[0]), 0
                if fresh:
                    count[4] = int(count[4]) | bit
                index = int(count[3]) + self._pass_calls * worker.num_workers + worker.id
                self._pass_calls += 1
            count[0] = max(int(count[0]), index + 1)
        return index

    def __call__(self, features) -> Mapping[str, Any]:
        batch = self.base(features)
        ids = batch["input_ids"]
        b, n = ids.shape
        if n > self.target_length:
            raise ValueError(f"a batch of {n} tokens is longer than target_length ({self.target_length}); "
                             "raise target_length or truncate the examples")
        generator = pose_generator(self.seed, self._rank(), self._index())
        batch["position_ids"] = pose_batch(b, n, self.target_length, self.chunks, generator).to(ids.device)
        if batch.get("attention_mask") is None:  # without a mask transformers reads jumps as packed sequences
            batch["attention_mask"] = torch.ones_like(ids)
        return batch
