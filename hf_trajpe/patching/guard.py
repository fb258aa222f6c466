"""``ForwardGuard``: one forward at a time on a patched model.

The positions of a forward live on the model's :class:`~.state.PatchState` from the pre-hook until the
post-hook: the replacement modules and attention functions of every layer read them there. Two threads
running one patched model at once would read each other's positions and get wrong outputs, silently.
They could not be made thread-local: a backward on another thread (CUDA's autograd threads, activation
checkpointing recomputing a layer) must read the positions its forward wrote. So the pre-hook enters the
guard and the post-hook (registered with ``always_call``, so it also runs when the forward raises)
leaves it, and a forward that starts on another thread while one runs raises at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

__all__ = ["ForwardGuard"]


class ForwardGuard:
    """Owned by one thread between :meth:`enter` and the matching :meth:`leave` (re-entrant within it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    def enter(self, describe: Callable[[], str]) -> None:
        """``describe``: names the model in the error (called only then: a forward should not format it)."""
        if torch.compiler.is_compiling():  # (a compiled graph has no threads of its own to guard against)
            return
        me = threading.get_ident()
        with self._lock:
            if self._owner is not None and self._owner != me:
                raise RuntimeError(
                    f"this hf_trajpe patched model ({describe()}) is running a forward in another thread: a patched "
                    "model keeps the positions of the current forward on itself, so it runs one forward at a "
                    "time. Give each thread its own copy (copy.deepcopy(model) gives an independent patched "
                    "copy), or serialize the calls with a lock"
                )
            self._owner = me
            self._depth += 1

    def held(self) -> bool:
        """Whether the calling thread owns the guard (always, inside a compiled graph)."""
        if torch.compiler.is_compiling():
            return True
        with self._lock:
            return self._owner == threading.get_ident()

    def leave(self) -> None:
        if torch.compiler.is_compiling():
            return
        with self._lock:
            if self._owner != threading.get_ident():  # (the refused thread's always-called post-hook)
                return
            self._depth -= 1
            if self._depth == 0:
                self._owner = None

    def __deepcopy__(self, memo: dict) -> ForwardGuard:
        return ForwardGuard()  # a copy of a model runs its own forwards
