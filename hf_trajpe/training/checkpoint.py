"""Atomic checkpoints: ``accelerator.save_state`` into a temporary folder, then one rename.

Layout under ``output_dir/checkpoints/``: ``step_000010/`` (complete: model, optimizer, RNG states of
every process, and ``trainer_state.json`` written last, with the step, the scheduler state and the
evaluation history), never a half-written folder under that name: every file is fsynced before the
rename that publishes the folder. A run killed mid-save leaves ``.tmp-step_000010/``, which
:func:`latest_checkpoint` ignores and the next start (:func:`hf_trajpe.training.files.clean_leftovers`)
or save removes. Only the newest ``keep_last`` complete checkpoints are kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from .files import TRAINER_STATE, RunFileError, fsync_dir, fsync_tree

__all__ = ["TRAINER_STATE", "checkpoint_dirs", "find_resume", "latest_checkpoint", "read_trainer_state",
           "save_checkpoint"]

_NAME = re.compile(r"^step_(\d+)$")


def checkpoint_dirs(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir() and (p / TRAINER_STATE).is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: str | Path) -> Path | None:
    dirs = checkpoint_dirs(root)
    return dirs[-1] if dirs else None


def find_resume(root: str | Path, resume: bool | str, log=print) -> Path | None:
    """The checkpoint a run starts from: ``resume`` a folder (it must exist), ``True`` the latest under
    ``root`` (None, said through ``log``, if there is none), ``False`` none, and then ``root`` must hold
    no checkpoint (``FileExistsError``: a run never trains over another one's checkpoints)."""
    root = Path(root)
    if resume and resume is not True:
        path = Path(resume)
        if not path.is_dir():
            raise FileNotFoundError(f"--resume {str(resume)!r}: no such checkpoint folder")
        read_trainer_state(path)  # a RunFileError naming the file if the folder is not a complete checkpoint
        return path
    latest = latest_checkpoint(root)
    if resume:
        if latest is None:
            log(f"--resume: no checkpoint under {root}; starting from step 0")
        return latest
    if latest is not None:
        raise FileExistsError(f"{root.parent} already holds checkpoints (latest {latest.name}); pass --resume to "
                              "continue that run, or choose another output_dir")
    return None


def read_trainer_state(checkpoint: str | Path) -> dict:
    """``trainer_state.json`` of a checkpoint; :class:`RunFileError` naming the file if it is missing or
    not a JSON object."""
    path = Path(checkpoint) / TRAINER_STATE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunFileError(f"{path} is missing: {checkpoint} is not a complete checkpoint") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFileError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or isinstance(state["step"], bool):
        raise RunFileError(f"{path}: not a trainer state (a JSON object with an integer 'step')")
    return state


def save_checkpoint(root: str | Path, step: int, trainer_state: dict, save_state: Callable[[str], None],
                    is_main: bool = True, barrier: Callable[[], None] = lambda: None, keep_last: int = 2) -> Path:
    """Write checkpoint ``step`` atomically; every process calls this (``save_state`` writes its share).

    1. main: remove stale temporaries; 2. all: ``save_state(tmp)``, then fsync every file under ``tmp``
    (each process: on a shared filesystem only the writer's fsync is sure to reach the disk); 3. main:
    ``trainer_state.json`` into ``tmp`` (fsync), fsync ``tmp``, rename ``tmp`` -> ``step_N``
    (``os.replace``: atomic on one filesystem), fsync ``root``, prune old checkpoints.
    """
    root = Path(root)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}"
    if is_main:
        root.mkdir(parents=True, exist_ok=True)
        for p in root.glob(".tmp-step_*"):
            shutil.rmtree(p, ignore_errors=True)
        tmp.mkdir()
    barrier()
    save_state(str(tmp))
    fsync_tree(tmp)
    barrier()
    if is_main:
        state_path = tmp / TRAINER_STATE
        with open(state_path, "w") as fh:
            json.dump(trainer_state, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(tmp)
        if final.exists():  # the same step saved again (e.g. after a resume): replace it whole
            old = root / f".old-step_{step:06d}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(root)
        for p in checkpoint_dirs(root)[:-keep_last]:
            shutil.rmtree(p, ignore_errors=True)
    barrier()
    return final

