"""The patch exposes the monitor of docs/spec.md, section 5; the learnable strength is shardable (FSDP2)."""

from __future__ import annotations

import torch
from patch_models import build, random_ids

import hf_trajpe
from hf_trajpe.strength import LearnableStrength


def test_monitor_records_trajectory_counters_and_detaches():
    model = build("gpt2").eval()
    handle = hf_trajpe.patch(model, "trajectory", strength=0.5)
    assert handle.monitor is None
    monitor = handle.attach_monitor()
    ids = random_ids(12, b=2)
    with torch.no_grad():
        model(input_ids=ids)
    stats = monitor.as_dict()
    assert stats["calls"] == 1 and stats["tokens"] == 24
    assert stats["displacement_mean"] > 0 and stats["displacement_max"] >= stats["displacement_mean"]
    assert stats["encode_seconds"] > 0 and stats["tokens_per_second"] > 0
    assert 0 <= stats["clamped_share"] <= 1 and stats["smoothness"] >= 0
    assert stats["steps"] == 22 and 1.0 < stats["step_mean"] <= 1.5 and stats["step_cv"] > 0
    assert handle.detach_monitor() is monitor and handle.monitor is None
    with torch.no_grad():
        model(input_ids=ids)
    assert monitor.as_dict()["calls"] == 1, "a detached monitor must not record"


def test_monitor_times_non_trajectory_encodings():
    model = build("llama").eval()
    handle = hf_trajpe.patch(model, "alibi")
    monitor = handle.attach_monitor(hf_trajpe.TrajectoryMonitor())
    with torch.no_grad():
        model(input_ids=random_ids(8, b=3))
    stats = monitor.as_dict()
    assert monitor.timed_calls == 1 and monitor.timed_tokens == 24 and stats["encode_seconds"] > 0
    assert stats["displacement_mean"] == 0 and stats["step_mean"] == 0 and stats["steps"] == 0


def test_learnable_strength_is_one_dimensional_and_loads_old_scalar_state():
    learn = LearnableStrength(0.3)
    assert learn.raw.shape == (1,), "FSDP2 fully_shard refuses scalar parameters"
    assert learn.value.shape == ()
    old = {"raw": torch.tensor(0.7)}  # saved by a version with a scalar raw
    learn.load_state_dict(old)
    assert float(learn.value) == float(torch.sigmoid(torch.tensor(0.7)))
