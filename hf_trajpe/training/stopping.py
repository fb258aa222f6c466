"""Stopping a run: signals, the launcher's exit, and the exit status that says why.

A one-process ``accelerate launch`` does not forward signals: killed, it leaves its child orphaned
(docs/notes.md, section 10). :class:`StopControl` (a part of :class:`~hf_trajpe.training.trainer.Trainer`)
turns SIGTERM/SIGINT, and the launcher's disappearance seen by a thread polling ``os.getppid()``, into a stop
at the next step boundary with a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

__all__ = ["LAUNCHER_ENV", "PARENT_POLL_SECONDS", "STOP_SIGNALS", "StopControl", "exit_status", "launcher_pid"]

#: the signals that stop a run with a checkpoint
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: environment variables set by ``accelerate launch`` (every launcher) and torchrun in their children
LAUNCHER_ENV = ("ACCELERATE_MIXED_PRECISION", "TORCHELASTIC_RUN_ID")
PARENT_POLL_SECONDS = 0.2


def exit_status(reason: str) -> int:
    """The process exit status for :meth:`Trainer.train`'s reason: 0 for ``done`` and ``stop_after``,
    ``128 + signal number`` for a stop by signal (143 for SIGTERM, 130 for SIGINT), as a shell reports a
    process killed by that signal."""
    if reason in ("done", "stop_after"):
        return 0
    return 128 + int(getattr(signal, reason, signal.SIGTERM))


def launcher_pid(parent: int | None = None) -> int | None:
    """The pid of the launcher this process was started by, to pass as ``Trainer(watch_parent=...)``:
    ``parent`` (default: ``os.getppid()``; best read at start-up) when ``accelerate launch`` or torchrun
    started this process (they set ``ACCELERATE_MIXED_PRECISION`` / ``TORCHELASTIC_RUN_ID``), else None.
    ``HF_TRAJPE_STOP_WITH_PARENT=1`` watches any parent, ``=0`` none."""
    parent = os.getppid() if parent is None else parent
    forced = os.environ.get("HF_TRAJPE_STOP_WITH_PARENT", "").strip().lower()
    if forced in ("0", "false", "no"):
        return None
    if forced in ("1", "true", "yes") or any(k in os.environ for k in LAUNCHER_ENV):
        return parent if parent > 1 else None
    return None


class StopControl:
    """Signal handlers and the launcher watch of a trainer (uses its ``_signal``, ``stop_detail``, ``_lock``,
    ``_sigints``, ``_old_handlers``, ``_parent``, ``_watcher`` and ``_watch_done``)."""

    def request_stop(self, signum: int = signal.SIGTERM, detail: str = "") -> None:
        """Stop at the next step boundary with a checkpoint, as if ``signum`` had arrived."""
        if self._signal is None:
            self._signal, self.stop_detail = int(signum), detail
            self._lock.mark("stopping")  # a run waiting for output_dir waits for this one's checkpoint

    def _install_signal_handlers(self) -> None:
        def handler(signum, frame):
            if signum == signal.SIGINT:
                self._sigints += 1
                if self._sigints > 1:
                    raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
            self.request_stop(signum)

        for signum in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not in the main thread: no handler
                self._old_handlers[signum] = signal.signal(signum, handler)
        if self._parent is not None and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch_parent, name="hf_trajpe-watch-parent", daemon=True)
            self._watcher.start()

    def _watch_parent(self) -> None:
        parent = self._parent
        while True:
            if os.getppid() != parent:
                # a signal sent to the whole process group (Ctrl-C) killed the launcher too: let its handler
                # run first, so that the stop is named after it
                if not self._watch_done.wait(PARENT_POLL_SECONDS):
                    self.request_stop(signal.SIGTERM, f"the launcher, pid {parent}, exited")
                return
            if self._watch_done.wait(PARENT_POLL_SECONDS):
                return

    def _restore_signal_handlers(self) -> None:
        self._watch_done.set()
        if self._watcher is not None:  # no thread of ours may outlive the run: one alive at interpreter exit
            self._watcher.join(timeout=2 * PARENT_POLL_SECONDS)  # made a rank abort after a good run
            self._watcher = None
        for signum, old in self._old_handlers.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signum, old)
        self._old_handlers = {}

    def _signal_name(self) -> str:
        """The stop signal's name; ``SIGTERM`` on a process that stopped because another one was signalled."""
        return signal.Signals(self._signal).name if self._signal is not None else "SIGTERM"
