"""Names and paths that come from configs: checked before they touch the file system.

A name from a YAML file (a study encoding, a tracker project) becomes part of a folder name, so it
must not climb out of the run's folder (``../x``), be absolute (``/x``), or hold characters a shell
or another file system reads differently. :func:`check_name` refuses those; :func:`inside` resolves
a path and refuses one that leaves its root; :func:`writable_dir` makes and probes an output folder
before any work, so a run never fails at its end for want of a place to write.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["NAME_PATTERN", "atomic_write_text", "check_name", "fsync_dir", "inside", "output_folder", "writable_dir"]

#: a letter or digit first, then letters, digits, ``_``, ``-``, ``.`` and ``+``; at most 100 characters
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")


def check_name(name: object, key: str) -> str:
    """``name`` if it is safe as one folder name; a ``ValueError`` naming ``key`` otherwise."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise ValueError(
            f"{key}: {name!r} is not a valid name: it becomes a folder name, so it must start with a letter or "
            "digit and hold only letters, digits, '_', '-', '.' and '+' (no '/', no '..', at most 100 "
            "characters); rename it, e.g. 'trajectory_rope'"
        )
    return name


def inside(root: str | os.PathLike, path: str | os.PathLike, key: str) -> Path:
    """``root / path`` resolved; a ``ValueError`` naming ``key`` when it is not inside ``root``."""
    base = Path(root).resolve()
    target = (base / path).resolve()
    if target != base and base not in target.parents:
        raise ValueError(
            f"{key}: {os.fspath(path)!r} resolves to {str(target)!r}, outside the run's folder {str(base)!r}; "
            "give a path inside it (a plain name, without '..' or a leading '/')"
        )
    return target


@contextlib.contextmanager
def output_folder(path: str | os.PathLike, what: str) -> Iterator[Path]:
    """:func:`writable_dir` for the work inside the block; when that work fails, the folders made here are
    removed again where they are still empty, so a failed command leaves no empty output folder behind."""
    folder = Path(path)
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    writable_dir(folder, what)
    try:
        yield folder
    except BaseException:
        for created in made:  # deepest first; stops at the first that holds anything
            try:
                created.rmdir()
            except OSError:
                break
        raise


def writable_dir(path: str | os.PathLike, what: str) -> Path:
    """Create ``path`` (and its parents) and check that a file can be written there; a ``ValueError``
    naming ``what`` and the folder otherwise. Called before any work starts."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ValueError(
            f"{what} {os.fspath(path)!r} cannot be created or written ({exc.strerror or exc}); choose a folder "
            "you can write to"
        ) from None
    return folder


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a folder (its entries: a rename in it is durable afterwards); a no-op where folders cannot be
    opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` by ``text`` atomically: ``.<name>.tmp-<pid>`` beside it, fsync, ``os.replace``,
    fsync of the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
