"""Two CPU processes: DDP through `accelerate launch` (the recipe), and the patched model under torch FSDP2.

accelerate cannot run FSDP on CPU (it falls back to MULTI_CPU; the recipe refuses such a launch), so the
FSDP test shards the patched model with torch's own ``fully_shard`` on gloo."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch

import hf_trajpe

from .runs import FAST, RECIPE, ROOT, TINY, env, losses, rank_summary

CPU_2PROC = ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"
TRAJ = ["encoding.name=trajectory", "encoding.options={strength: 0.3, learnable_strength: true}",
        "train.eval_every=3", "train.save_every=3", "train.max_steps=6"]


def launch_two(out, *overrides, resume=False):
    accelerate = shutil.which("accelerate")
    assert accelerate, "the accelerate command is not installed"
    cmd = [accelerate, "launch", "--config_file", str(CPU_2PROC), str(RECIPE), "--config", str(TINY),
           f"output_dir={out}", *FAST, *overrides] + (["--resume"] if resume else [])
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(env(), ACCELERATE_USE_CPU="true"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def test_two_cpu_processes_agree_and_the_checkpoint_reloads(tmp_path):
    out, split = tmp_path / "full", tmp_path / "split"
    proc = launch_two(out, *TRAJ)
    assert proc.stdout.count("of world size 2 (MULTI_CPU") == 2, proc.stdout[-2000:]
    r0, r1 = rank_summary(out, 0), rank_summary(out, 1)
    assert r0["world_size"] == r1["world_size"] == 2, (
        "a CPU launch can silently start one process (docs/notes.md, section 1)")
    assert (r0["rank"], r1["rank"]) == (0, 1) and r0["distributed_type"] == "MULTI_CPU"
    assert r0["losses"] == r1["losses"] and len(r0["losses"]) == 6
    assert r0["param_checksum"] == r1["param_checksum"], "parameters (strength included) must stay in sync"
    ckpt = out / "checkpoints" / "step_000006"
    assert {"random_states_0.pkl", "random_states_1.pkl", "model.safetensors"} <= {p.name for p in ckpt.iterdir()}

    # the saved model reloads with its patch and gives the outputs the run recorded
    model = hf_trajpe.from_pretrained(out / "final").eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(r0["probe_input_ids"])).logits.double().sum()
    assert float(logits) == pytest.approx(r0["probe_logits_sum"], rel=1e-6, abs=1e-4)

    # the checkpoint reloads into two processes: stop at 3, resume to 6, same curve
    launch_two(split, *TRAJ, "train.stop_after=3")
    launch_two(split, *TRAJ, resume=True)
    a, b = losses(out), losses(split)
    assert sorted(a) == list(range(1, 7)) and sorted(b) == sorted(a)
    diff = max(abs(a[k] - b[k]) for k in a)
    print(f"two processes, resumed at step 3 of 6: max |loss difference| = {diff:.3g}")
    assert diff <= 1e-6


def test_patched_model_trains_under_fsdp2_like_a_single_process(tmp_path):
    from . import fsdp2_worker

    torchrun = shutil.which("torchrun")
    assert torchrun, "torchrun is not installed"
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2",
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
