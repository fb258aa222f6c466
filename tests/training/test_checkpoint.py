"""Atomic checkpoints: a save that dies half-way never replaces or hides the last complete one; files are
fsynced before the rename that publishes them; leftovers of interrupted saves are cleaned at start; one
trainer per output_dir."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from hf_trajpe.training.checkpoint import (
    checkpoint_dirs,
    find_resume,
    latest_checkpoint,
    read_trainer_state,
    save_checkpoint,
)
from hf_trajpe.training.files import OutputLock, RunFileError

from .runs import TINY


def fake_save(tmp: str) -> None:
    (Path(tmp) / "model.safetensors").write_text("weights")


def test_save_keeps_last_n_and_latest(tmp_path):
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, {"step": step}, fake_save, keep_last=2)
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step_000004", "step_000006"]
    assert read_trainer_state(latest_checkpoint(tmp_path))["step"] == 6
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_save_that_dies_half_way_leaves_the_previous_checkpoint(tmp_path):
    save_checkpoint(tmp_path, 2, {"step": 2}, fake_save)

    def dying_save(tmp: str) -> None:
        (Path(tmp) / "model.safetensors").write_text("half")
        raise KeyboardInterrupt("killed mid-write")

    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 4, {"step": 4}, dying_save)
    assert (tmp_path / ".tmp-step_000004").exists(), "the half-written save stays under its temporary name"
    assert latest_checkpoint(tmp_path).name == "step_000002"
    save_checkpoint(tmp_path, 6, {"step": 6}, fake_save)
    assert not (tmp_path / ".tmp-step_000004").exists(), "the next save cleans up"
    assert latest_checkpoint(tmp_path).name == "step_000006"


def test_a_folder_without_trainer_state_is_not_a_checkpoint(tmp_path):
    (tmp_path / "step_000009").mkdir()
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "missing") is None


def test_saving_the_same_step_again_replaces_it_whole(tmp_path):
    save_checkpoint(tmp_path, 3, {"step": 3, "v": 1}, fake_save)
    save_checkpoint(tmp_path, 3, {"step": 3, "v": 2}, fake_save)
    assert read_trainer_state(latest_checkpoint(tmp_path))["v"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["step_000003"]


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names fsynced descriptors through /proc")
def test_every_checkpoint_file_is_fsynced_before_the_rename_that_publishes_it(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", _fd_path(fd))), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(a), str(b))), real_replace(a, b))[1])

    def save_state(tmp: str) -> None:
        (Path(tmp) / "model.safetensors").write_text("weights")
        (Path(tmp) / "sub").mkdir()
        (Path(tmp) / "sub" / "optimizer.bin").write_text("moments")

    final = save_checkpoint(tmp_path, 3, {"step": 3}, save_state)
    publish = next(i for i, e in enumerate(events) if e[0] == "replace" and e[2] == str(final))
    tmp = events[publish][1]
    synced = {e[1] for e in events[:publish] if e[0] == "fsync"}
    for name in ("model.safetensors", "sub/optimizer.bin", "trainer_state.json"):
        assert f"{tmp}/{name}" in synced, f"{name} was not fsynced before the rename: {sorted(synced)}"
    assert tmp in synced and f"{tmp}/sub" in synced, "the folders are fsynced too"
    assert ("fsync", str(tmp_path)) in events[publish:], "the rename itself is made durable"


def test_a_file_another_process_renames_during_the_fsync_is_skipped(tmp_path, monkeypatch):
    """Two processes write into one checkpoint folder; one lists the folder while the other still writes a
    temporary that it renames a moment later (seen in a two-process run: FileNotFoundError on rank 1). The
    listing process skips the vanished file; every file that stays is fsynced."""
    import hf_trajpe.training.files as files

    (tmp_path / "a.bin").write_text("a")
    (tmp_path / ".tmpXYZ").write_text("other process's temporary")
    (tmp_path / "z.bin").write_text("z")
    real = files._fsync_file
    synced = []

    def racing(path):
        if path.name == ".tmpXYZ":
            os.replace(path, tmp_path / "renamed.bin")  # its writer renames it between the listing and the fsync
        synced.append(path.name)
        return real(path)

    monkeypatch.setattr(files, "_fsync_file", racing)
    got = files.fsync_tree(tmp_path)
    assert [p.name for p in got] == ["a.bin", "z.bin"] and synced == [".tmpXYZ", "a.bin", "z.bin"]


def _complete(folder: Path, step: int, tag: str = "") -> None:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_text(f"weights{tag}")
    (folder / "trainer_state.json").write_text(json.dumps({"step": step, "tag": tag}))


def test_leftovers_of_interrupted_saves_are_cleaned_when_a_run_starts(tmp_path):
    from hf_trajpe.training import load_config
    from hf_trajpe.training.trainer import Trainer

    ck = tmp_path / "checkpoints"
    _complete(ck / "step_000002", 2)
    (ck / ".tmp-step_000004").mkdir(parents=True)  # killed while writing step 4
    (ck / ".tmp-step_000004" / "model.safetensors").write_text("half")
    _complete(ck / ".old-step_000003", 3, "old")  # killed between the two renames of a re-save of step 3 ...
    _complete(ck / ".tmp-step_000003", 3, "new")  # ... whose new copy was complete
    _complete(ck / ".old-step_000001", 1, "old")  # a re-save of step 1 killed after its first rename, new copy gone
    (tmp_path / ".metrics.jsonl.tmp-4242").write_text('{"step": 1}\n')  # killed during an atomic rewrite
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / ".rank_0.json.tmp-4242").write_text("{")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')

    lines = []
    cfg = load_config(TINY, [f"output_dir={tmp_path}"])
    trainer = Trainer(cfg, resume=True, log=lines.append)
    try:
        assert trainer.resume_from == ck / "step_000003"
    finally:
        trainer.cleanup()
    assert sorted(p.name for p in ck.iterdir()) == ["step_000001", "step_000002", "step_000003"]
    assert json.loads((ck / "step_000003" / "trainer_state.json").read_text())["tag"] == "new"
    assert json.loads((ck / "step_000001" / "trainer_state.json").read_text())["tag"] == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hf_trajpe.lock", "checkpoints", "metrics.jsonl", "ranks"]
    assert not list((tmp_path / "ranks").iterdir())
    assert sum("clean-up of an interrupted save" in line for line in lines) == 6, lines


def test_a_second_trainer_is_refused_while_one_runs_and_waits_while_one_stops(tmp_path):
    first = OutputLock(tmp_path).acquire()
    try:
        with pytest.raises(FileExistsError, match=rf"in use by a running training process \(pid {os.getpid()}\)"):
            OutputLock(tmp_path).acquire()
        first.mark("stopping")  # what a trainer does when a signal (or its launcher's exit) stops it
        with pytest.raises(FileExistsError, match="has been stopping for over"):
            OutputLock(tmp_path).acquire(wait_stopping=0.3, log=lambda m: None)
        threading.Timer(0.5, first.release).start()
        said = []
        t0 = time.monotonic()
        second = OutputLock(tmp_path).acquire(wait_stopping=30, log=said.append)
        assert time.monotonic() - t0 >= 0.4 and second.held
        assert said and "waiting for the training process" in said[0]
        second.release()
    finally:
        first.release()


def test_a_checkpoint_state_that_is_not_json_names_the_file(tmp_path):
    folder = tmp_path / "step_000002"
    folder.mkdir()
    (folder / "trainer_state.json").write_text('{"step": 2, "eval')
    with pytest.raises(RunFileError, match=r"step_000002/trainer_state.json: not valid JSON"):
        read_trainer_state(folder)
    with pytest.raises(RunFileError, match="trainer_state.json is missing"):
        find_resume(tmp_path, str(tmp_path))  # --resume a folder that is not a checkpoint
