"""Atomic checkpoints: a save that dies half-way never replaces or hides the last complete one."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_trajpe.training.checkpoint import checkpoint_dirs, latest_checkpoint, read_trainer_state, save_checkpoint


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
