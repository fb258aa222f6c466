"""Two CPU processes: DDP through `accelerate launch` (the recipe), and the patched model under torch FSDP2.

accelerate cannot run FSDP on CPU (it falls back to MULTI_CPU; the recipe refuses such a launch), so the
FSDP test shards the patched model with torch's own ``fully_shard`` on gloo."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import torch

import hf_trajpe
from hf_trajpe.training.checkpoint import read_trainer_state

from .runs import FAST, RECIPE, ROOT, TINY, command, env, losses, rank_summary

CPU_2PROC = ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"
TRAJ = ["encoding.name=trajectory", "encoding.options={strength: 0.3, learnable_strength: true}",
        "train.eval_every=3", "train.save_every=3", "train.max_steps=6"]


def launch_two(out, *overrides, resume=False):
    """``accelerate launch`` with two CPU processes; asserts that it got them: both ranks report world size 2
    (a CPU launch can silently start one process, or two unsynchronised ones: docs/notes.md, section 1)."""
    cmd = [command("accelerate"), "launch", "--config_file", str(CPU_2PROC), str(RECIPE), "--config", str(TINY),
           f"output_dir={out}", *FAST, *overrides] + (["--resume"] if resume else [])
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(env(), ACCELERATE_USE_CPU="true"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    # (the two ranks write to one pipe: their lines may interleave, so no line-based parsing)
    ranks = sorted(re.findall(r"\[hf_trajpe\] rank (\d+) of world size (\d+) \((\w+)", proc.stdout))
    assert ranks == [("0", "2", "MULTI_CPU"), ("1", "2", "MULTI_CPU")], proc.stdout[-2000:]
    assert "resuming with world_size" not in proc.stderr, "the checkpoint was saved with another world size"
    return proc


def test_two_cpu_processes_train_on_different_data_and_stay_in_sync(tmp_path):
    out = tmp_path / "full"
    launch_two(out, *TRAJ)
    r0, r1 = rank_summary(out, 0), rank_summary(out, 1)
    assert r0["world_size"] == r1["world_size"] == 2
    assert (r0["rank"], r1["rank"]) == (0, 1) and r0["distributed_type"] == "MULTI_CPU"
    # per-rank evidence: each rank's own loss (before the mean) comes from its own shard of the data ...
    steps = [str(s) for s in range(1, 7)]
    assert sorted(r0["local_losses"], key=int) == sorted(r1["local_losses"], key=int) == steps
    for s in steps:
        assert abs(r0["local_losses"][s] - r1["local_losses"][s]) > 1e-4, f"step {s}: both ranks saw the same data"
        mean = (r0["local_losses"][s] + r1["local_losses"][s]) / 2
        assert r0["losses"][s] == pytest.approx(mean, abs=1e-6), "the logged loss is the mean over the ranks"
    # ... and yet the parameters are the same after every all-reduced step (strength included)
    assert r0["param_checksum"] == r1["param_checksum"], "parameters (strength included) must stay in sync"
    ckpt = out / "checkpoints" / "step_000006"
    assert {"random_states_0.pkl", "random_states_1.pkl", "model.safetensors"} <= {p.name for p in ckpt.iterdir()}

    # the saved model reloads with its patch and gives the outputs the run recorded
    model = hf_trajpe.from_pretrained(out / "final").eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(r0["probe_input_ids"])).logits.double().sum()
    assert float(logits) == pytest.approx(r0["probe_logits_sum"], rel=1e-6, abs=1e-4)


@pytest.mark.slow  # three launches of two processes (about 45 CPU s): in `make test-slow`
def test_two_cpu_processes_resume_each_rank_on_its_shard_with_the_same_curve(tmp_path):
    """The checkpoint reloads into two processes: stop at 3, resume to 6, the curve of the uninterrupted run;
    both launches are checked for world size 2 (launch_two), and the checkpoint says it was saved by two."""
    out, split = tmp_path / "full", tmp_path / "split"
    launch_two(out, *TRAJ)
    r0, r1 = rank_summary(out, 0), rank_summary(out, 1)
    launch_two(split, *TRAJ, "train.stop_after=3")
    assert read_trainer_state(split / "checkpoints" / "step_000003")["world_size"] == 2
    resumed = launch_two(split, *TRAJ, resume=True)
    assert "at step 3" in resumed.stdout
    assert [rank_summary(split, r)["world_size"] for r in (0, 1)] == [2, 2]
    a, b = losses(out), losses(split)
    assert sorted(a) == list(range(1, 7)) and sorted(b) == sorted(a)
    diff = max(abs(a[k] - b[k]) for k in a)
    print(f"two processes, resumed at step 3 of 6: max |loss difference| = {diff:.3g}")
    assert diff <= 1e-6
    local = {r: rank_summary(split, r)["local_losses"] for r in (0, 1)}
    assert sorted(local[0], key=int) == ["4", "5", "6"], "the resumed launch trained steps 4-6"
    for r in (0, 1):
        for s in ("4", "5", "6"):
            assert local[r][s] == pytest.approx((r0, r1)[r]["local_losses"][s], abs=1e-6), "each rank resumed its shard"


def test_patched_model_trains_under_fsdp2_like_a_single_process(tmp_path):
    from . import fsdp2_worker

    proc = subprocess.run([command("torchrun"), "--standalone", "--nproc_per_node", "2",
                           str(ROOT / "tests/training/fsdp2_worker.py"), str(tmp_path)],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-6000:]
    ranks = [json.loads((tmp_path / f"fsdp2_rank_{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert all(r["raw_type"] == "DTensor" for r in ranks), "the learnable strength must be sharded by FSDP2"
    ref_losses, ref_strength = fsdp2_worker.train_reference()
    for r in ranks:
        assert r["losses"] == pytest.approx(ref_losses, rel=1e-5)
        assert r["strength"] == pytest.approx(ref_strength, rel=1e-5)
    assert ref_strength != pytest.approx(0.3, abs=1e-6), "the strength must have trained"
