"""The processes a launcher started (``accelerate launch``, ``torchrun``), over which a RULER run spreads its
prompts (:func:`~.methods.evaluate_ruler`; docs/evaluation.md, "RULER").

The launcher's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) is read
directly, and the processes exchange rows over a gloo group of their own: it works the same on CPUs and GPUs,
whatever accelerate would set up (on CPU some launches give it unsynchronised processes: docs/notes.md, section
1). Without a launcher, or with one process, nothing is set up and nothing is imported.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any, TypeVar

__all__ = ["Processes", "launched"]

T = TypeVar("T")
#: how long a process that finished its share waits for the others (a CPU share can take days)
WAIT = timedelta(days=30)


@dataclass(frozen=True)
class Processes:
    """Process ``rank`` of ``world``; ``group``: the gloo group they exchange objects over (none for one)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    group: Any = None

    @property
    def main(self) -> bool:
        """The process that reads and writes the rows file and reports."""
        return self.rank == 0

    def share(self, items: Sequence[T]) -> list[T]:
        """This process's items: every ``world``-th from its ``rank`` on (lengths mixed, so shares cost alike)."""
        return list(items[self.rank::self.world])

    def broadcast(self, obj: T) -> T:
        """The main process's ``obj``, in every process."""
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather(self, obj: T) -> list[T]:
        """Every process's ``obj``, by rank, in every process (also a barrier)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def device(self) -> str:
        """Where this process reads: a GPU of its own where there are GPUs (shared round-robin when fewer than
        the processes), the CPU otherwise. One process keeps the CPU, as a run that is not spread does."""
        import torch

        if self.world > 1 and torch.cuda.is_available():
            return f"cuda:{self.local_rank % torch.cuda.device_count()}"
        return "cpu"


def _int(name: str, default: int) -> int:
    text = os.environ.get(name, str(default))
    if not text.strip().isdigit():
        raise ValueError(f"the environment variable {name}={text!r} is not a whole number; start the processes with "
                         "accelerate launch or torchrun, or unset it")
    return int(text)


@cache
def launched() -> Processes:
    """The processes of this launch; one when no launcher started several. Sets up their group once."""
    world = _int("WORLD_SIZE", 1)
    if world <= 1:
        if os.environ.get("MASTER_ADDR") and os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true"):
            warnings.warn("accelerate launch started one process: with --cpu it starts one whatever --num_processes "
                          "says; for several CPU processes launch with ACCELERATE_USE_CPU=true accelerate launch "
                          "--multi_gpu --num_processes N", RuntimeWarning, stacklevel=2)
        return Processes()
    import torch.distributed as dist

    if dist.is_initialized():  # a script that set up its own group (an Accelerator): a gloo one beside it
        group = dist.new_group(backend="gloo", timeout=WAIT)
    else:
        dist.init_process_group("gloo", timeout=WAIT)  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the launcher
        group = None
    return Processes(dist.get_rank(), dist.get_world_size(), _int("LOCAL_RANK", 0), group)
