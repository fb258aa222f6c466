"""The trust boundary of saved files: no file this project reads back is unpickled with arbitrary classes."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest
import torch

from .runs import ROOT, TINY, run_recipe


def _torch_loads(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                yield path.relative_to(ROOT), node


def test_every_torch_load_in_the_project_uses_weights_only():
    calls = [(p, n) for d in ("hf_trajpe", "recipes", "scripts") for p, n in _torch_loads(ROOT / d)]
    assert calls, "the scan found no torch.load at all: it is looking in the wrong place"
    unsafe = [f"{p}:{n.lineno}" for p, n in calls
              if not any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                         for k in n.keywords)]
    assert not unsafe, f"torch.load without weights_only=True (it would run any pickled code): {unsafe}"


def test_the_study_rows_file_loads_with_weights_only(tmp_path):
    """hf_trajpe.study saves the training rows (ids, loss mask, validation rows) with torch.save and reads
    them back with weights_only=True (hf_trajpe.study.rows)."""
    from hf_trajpe.study.rows import load_rows, save_rows
    from hf_trajpe.training import RunData

    blocks = torch.randint(0, 256, (6, 64))
    save_rows(tmp_path / "train_rows.pt", RunData(blocks, {"t": blocks[:2]}, ["t"], blocks > 100))
    back = load_rows(tmp_path / "train_rows.pt")
    assert torch.equal(back.train, blocks) and torch.equal(back.loss_mask, blocks > 100)
    assert torch.equal(back.eval_blocks["t"], blocks[:2]) and back.content_types == ["t"]


class _Payload:
    """Unpickled with arbitrary classes allowed, this would create the file ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


@pytest.mark.slow
def test_resume_refuses_a_checkpoint_whose_rng_file_carries_code(tmp_path):
    """About 12 s (two launches). The RNG states are read with torch.load(weights_only=True), and a file that
    does not load is an error (accelerate alone skips it silently); the scheduler state is JSON."""
    run, marker = tmp_path / "run", tmp_path / "pwned"
    run_recipe(TINY, run, "train.max_steps=2", "train.eval_every=0")
    ckpt = run / "checkpoints" / "step_000002"
    assert not list(ckpt.glob("custom_checkpoint_*")), "the scheduler state must not be a pickle"
    with open(ckpt / "random_states_0.pkl", "wb") as fh:
        pickle.dump({"random_state": _Payload(str(marker))}, fh)
    proc = run_recipe(TINY, run, "train.max_steps=3", "train.eval_every=0", resume=True, check=False)
    assert not marker.exists(), "the pickled payload ran"
    # accelerate's load_state would skip the unreadable file silently and resume with other random states
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "random_states_0.pkl: cannot be read with torch.load(weights_only=True)" in proc.stderr, proc.stderr[-2000:]
