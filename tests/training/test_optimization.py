"""The one learning-rate schedule (the recipe's and the study's): warm-up, decay, floor."""

from __future__ import annotations

import pytest
import torch

from hf_trajpe.training import ConfigError, build_scheduler, config_from_dict, lr_factor
from hf_trajpe.training.yaml_files import read_config_file

from .runs import TINY


def study_schedule_before(step: int, steps: int, warmup: int) -> float:
    """The study's own schedule before it trained through hf_trajpe.training (kept to prove equality)."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.1, 1.0 - (step - warmup) / max(1, steps - warmup))


@pytest.mark.parametrize("steps,warmup", [(600, 30), (80, 10), (4, 2), (5, 0), (3, 7)])
def test_linear_with_floor_is_the_study_schedule_bit_for_bit(steps, warmup):
    for step in range(steps + 2):
        assert lr_factor(step, steps, warmup, "linear", 0.1) == study_schedule_before(step, steps, warmup)


def test_warmup_decay_shapes():
    assert [lr_factor(s, 20, 4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]  # the first step already trains
    assert lr_factor(4, 20, 4) == 1.0 and lr_factor(12, 20, 4) == 0.5 and lr_factor(20, 20, 4) == 0.0
    assert lr_factor(12, 20, 4, "cosine") == pytest.approx(0.5) and lr_factor(20, 20, 4, "cosine") == 0.0
    assert lr_factor(19, 20, 4, "cosine", min_lr_ratio=0.2) == 0.2
    assert lr_factor(0, 20, 0, "constant") == lr_factor(19, 20, 4, "constant") == 1.0
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_factor(5, 20, 4, "step")


def test_scheduler_steps_the_factor_of_the_config():
    data = read_config_file(TINY)  # with its base file's sections
    data["schedule"] = {"name": "linear", "warmup_steps": 3, "min_lr_ratio": 0.1}
    data["train"]["max_steps"] = 10
    cfg = config_from_dict(data)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = build_scheduler(opt, cfg)
    seen = []
    for _ in range(12):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == [2.0 * lr_factor(s, 10, 3, "linear", 0.1) for s in range(12)]
    with pytest.raises(ConfigError, match="schedule.min_lr_ratio"):
        config_from_dict({**data, "schedule": {"min_lr_ratio": 1.5}})
