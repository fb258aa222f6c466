"""Files of a run that survive interruption: atomic rewrites, fsync before a rename that publishes, the
clean-up of what an interrupted save left behind, and the lock that keeps two trainers out of one
``output_dir``.

- :func:`atomic_write_text`: write a temporary file beside the target, fsync it, ``os.replace`` it onto the
  target, fsync the folder. A reader sees the old file or the new one, never a part.
- :func:`fsync_tree`: fsync every file (and folder) under a folder, before the rename that marks a
  checkpoint complete.
- :func:`clean_leftovers`: remove the temporaries of interrupted saves (``checkpoints/.tmp-step_N``,
  ``checkpoints/.old-step_N``, ``.<name>.tmp-<pid>`` files), restoring a checkpoint that a same-step
  re-save had moved aside.
- :class:`OutputLock`: an exclusive ``flock`` on ``output_dir/.hf_trajpe.lock`` held by the main process
  while it trains. A second run on the same folder waits while the holder is stopping (saving its last
  checkpoint after a signal) and is refused while it is running.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from ..paths import atomic_write_text, fsync_dir  # (re-exported: the training modules' file helpers)

__all__ = ["LOCK_NAME", "OutputLock", "RunFileError", "atomic_write_text", "clean_leftovers", "fsync_dir",
           "fsync_tree"]

LOCK_NAME = ".hf_trajpe.lock"
_TMP_FILE = re.compile(r"^\..+\.tmp-\d+$")

#: the trainer's state file in a checkpoint: a checkpoint folder is complete once it holds this file
TRAINER_STATE = "trainer_state.json"


class RunFileError(ValueError):
    """A file of a run cannot be read; the message names the file (and the line)."""


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> list[Path]:
    """fsync every file under ``root``, then every folder (deepest first); returns the files. A file gone between
    the listing and its fsync is skipped: in a checkpoint every process writes into, it is another process's
    temporary (written, then renamed), which its writer fsyncs under its final name."""
    root = Path(root)
    files, dirs = [], [root]
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            continue
        if path.is_file():
            try:
                _fsync_file(path)
            except FileNotFoundError:
                continue
            files.append(path)
        elif path.is_dir():
            dirs.append(path)
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(d)
    return files


def clean_leftovers(output_dir: str | os.PathLike, log=print) -> list[str]:
    """Remove what interrupted saves left in ``output_dir`` (call it only while holding the
    :class:`OutputLock`, so that no other process is saving there). Returns what was done, one line each.

    ``checkpoints/.old-step_N`` is a complete checkpoint that a re-save of step N moved aside: if
    ``step_N`` is missing, the re-save's complete ``.tmp-step_N`` (it holds ``trainer_state.json``) is
    renamed to ``step_N``, else the old one is put back."""
    out = Path(output_dir)
    done: list[str] = []
    root = out / "checkpoints"
    if root.is_dir():
        for old in sorted(root.glob(".old-step_*")):
            name = old.name[len(".old-"):]
            final, tmp = root / name, root / f".tmp-{name}"
            if not (final / TRAINER_STATE).is_file():
                if final.exists():
                    shutil.rmtree(final, ignore_errors=True)
                if (tmp / TRAINER_STATE).is_file():
                    os.replace(tmp, final)
                    done.append(f"completed the interrupted re-save of {final}")
                else:
                    os.replace(old, final)
                    done.append(f"restored {final} from {old.name}")
                    continue
            shutil.rmtree(old, ignore_errors=True)
            done.append(f"removed {old}")
        for tmp in sorted(root.glob(".tmp-step_*")):
            shutil.rmtree(tmp, ignore_errors=True)
            done.append(f"removed the half-written checkpoint {tmp}")
        fsync_dir(root)
    for folder in (out, out / "ranks"):
        if folder.is_dir():
            for p in sorted(folder.iterdir()):
                if _TMP_FILE.match(p.name) and p.is_file():
                    p.unlink(missing_ok=True)
                    done.append(f"removed the temporary file {p}")
    for line in done:
        log(f"[hf_trajpe] clean-up of an interrupted save: {line}")
    return done


class OutputLock:
    """``flock`` on ``output_dir/.hf_trajpe.lock``, held from :meth:`acquire` to :meth:`release` (or the
    process's end: the kernel drops it). The file says ``<pid> running`` or ``<pid> stopping``.

    :meth:`acquire` waits up to ``wait_stopping`` seconds for a holder that is stopping (it saves a
    checkpoint and exits) and raises ``FileExistsError`` at once for one that is running. Without
    ``fcntl`` (Windows) there is no lock."""

    def __init__(self, output_dir: str | os.PathLike) -> None:
        self.path = Path(output_dir) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _holder(self) -> tuple[str, str]:
        try:
            pid, _, state = self.path.read_text().strip().partition(" ")
        except OSError:
            return "?", ""
        return pid or "?", state.strip()

    def acquire(self, wait_stopping: float = 600.0, log=print, poll: float = 0.2) -> OutputLock:
        try:
            import fcntl
        except ImportError:  # no flock on this platform
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline, said = time.monotonic() + wait_stopping, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                pid, state = self._holder()
                if state != "stopping":
                    os.close(fd)
                    raise FileExistsError(
                        f"{self.path.parent} is in use by a running training process (pid {pid}); stop it first "
                        "(SIGTERM saves a checkpoint) or choose another output_dir") from None
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise FileExistsError(
                        f"{self.path.parent}: the training process pid {pid} has been stopping for over "
                        f"{wait_stopping:.0f} s; wait for it to exit, then run again") from None
                if not said:
                    log(f"[hf_trajpe] waiting for the training process pid {pid} to save its checkpoint and exit")
                    said = True
                time.sleep(poll)
        self._fd = fd
        os.ftruncate(fd, 0)
        self.mark("running")
        return self

    def mark(self, state: str) -> None:
        """Write ``<pid> <state>`` into the lock file (``running`` or ``stopping``): one write of a fixed
        width at offset 0, so that a reader never sees a partial record."""
        if self._fd is None:
            return
        data = f"{os.getpid()} {state:<8}\n".encode()
        try:
            os.pwrite(self._fd, data, 0)
        except OSError:
            pass

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the flock

    def __del__(self) -> None:
        self.release()
