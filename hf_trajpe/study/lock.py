"""One study at a time in an ``output_dir``.

Two studies in one folder would both build the data and train the same models, and trip over each other's
temporary folders. :class:`StudyLock` holds ``output_dir/.hf_trajpe_study.lock`` for the whole study: an
exclusive ``flock`` (dropped by the kernel when the process ends, however it ends), and in the file the
holder's pid, host and start time, which a refused run names. A lock file left by a run that was killed
blocks nothing: its flock went with its process; the next run takes the file over and says whose it was.
Without ``fcntl`` (Windows) the file is created exclusively (``O_CREAT | O_EXCL``) instead, and one whose
pid no longer runs on this host is taken over.
"""

from __future__ import annotations

import datetime
import functools
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["LOCK_NAME", "StudyLock", "locking_output_dir"]

#: the lock file inside a study's ``output_dir`` (the training runs' own is ``.hf_trajpe.lock``)
LOCK_NAME = ".hf_trajpe_study.lock"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


class StudyLock:
    """Held from :meth:`acquire` to :meth:`release` (a context manager); ``FileExistsError`` naming the
    folder and the holder when another study holds it, or when ``output_dir`` is a file."""

    def __init__(self, output_dir: str | os.PathLike, log: Callable[[str], None] = _stderr) -> None:
        self.folder = Path(output_dir)
        self.path = self.folder / LOCK_NAME
        self.log = log
        self._fd: int | None = None
        self._exclusive_file = False

    def _record(self) -> str:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return f"{os.getpid()} {socket.gethostname()} {started}\n"

    @staticmethod
    def _read(text: str) -> tuple[int | None, str, str]:
        """``(pid, host, start time)`` of a lock file's text (``None``, "", "" where it says nothing)."""
        parts = text.split()
        if len(parts) < 3 or not parts[0].isdigit():
            return None, "", ""
        return int(parts[0]), parts[1], parts[2]

    def _describe(self, text: str) -> str:
        pid, host, started = self._read(text)
        if pid is None:
            return "a process that has not written its pid yet"
        return f"pid {pid} on {host}, started {started}"

    def _make_folder(self) -> None:
        if self.folder.exists() and not self.folder.is_dir():
            raise FileExistsError(f"output_dir {str(self.folder)!r} is a file, not a folder; set output_dir to a "
                                  "folder (the study writes its data, models and reports there)")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise FileExistsError(f"output_dir {str(self.folder)!r} cannot be created ({err.strerror or err}); "
                                  "set output_dir to a folder you can write to") from None

    def _refuse(self, text: str) -> FileExistsError:
        return FileExistsError(
            f"{self.folder} is in use by another study ({self._describe(text)}): two studies in one output_dir "
            "would train the same models over each other. Wait for it to finish, or set output_dir to another "
            f"folder (the lock is {self.path})")

    def _take_over_note(self, text: str) -> None:
        pid, _, _ = self._read(text)
        if pid is not None and pid != os.getpid():
            self.log(f"[hf_trajpe] {self.path}: taking over the lock of {self._describe(text)}, which no longer "
                     "runs (a study that was stopped or killed); its finished models are reused")

    def acquire(self) -> StudyLock:
        self._make_folder()
        try:
            import fcntl
        except ImportError:
            return self._acquire_exclusive_file()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 200, 0).decode(errors="replace")
            os.close(fd)
            raise self._refuse(text) from None
        self._take_over_note(os.pread(fd, 200, 0).decode(errors="replace"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, self._record().encode(), 0)
        self._fd = fd
        return self

    def _acquire_exclusive_file(self) -> StudyLock:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                text = self.path.read_text(errors="replace")
                pid, host, _ = self._read(text)
                if pid is None or host != socket.gethostname() or _alive(pid):
                    raise self._refuse(text) from None
                self._take_over_note(text)
                self.path.unlink(missing_ok=True)
                continue
            os.write(fd, self._record().encode())
            self._fd, self._exclusive_file = fd, True
            return self
        raise self._refuse(self.path.read_text(errors="replace"))

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if self._exclusive_file:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            return
        os.ftruncate(fd, 0)  # a finished study leaves nothing to take over
        os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> StudyLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def locking_output_dir(run_study: Callable) -> Callable:
    """``run_study(cfg, ..., log=None)`` holding the lock of ``cfg.output_dir`` for the whole study."""

    @functools.wraps(run_study)
    def locked(cfg, *args, log=None, **kwargs):
        with StudyLock(cfg.output_dir, log or _stderr):
            return run_study(cfg, *args, log=log, **kwargs)

    return locked
