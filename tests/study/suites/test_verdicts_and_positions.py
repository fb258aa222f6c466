"""The study's first-screen logic without training: the control's diagnosis (calibration of under-trained
models against a real failure), the per-pair counts, and the displacement statistics of the trajectory
positions (the patch's monitor plus the steps)."""

from __future__ import annotations

import pytest
import torch

from hf_trajpe import TrajectoryMonitor
from hf_trajpe.evaluation.positions import mean_statistics, position_statistics, summarize
from hf_trajpe.study.suites.content.control import diagnose_control
from hf_trajpe.study.suites.content.summary import pair_sentence


def _control(mass: float, ppl: float = 110.0) -> dict:
    return {"floor": 95, "perplexity": ppl, "alphabet_mass": mass, "perplexity_within_alphabet": ppl * mass,
            "perplexity_after_16": ppl, "n_tokens": 100}


GAIN = {"delta_pct": 8.0, "ci": (6.0, 10.0)}
ROWS = [("rope", "learned", 128, GAIN), ("alibi", "learned", 128, {"delta_pct": 0.1, "ci": (-0.4, 0.6)})]


def test_gains_of_under_trained_models_are_calibration_in_plain_words():
    diag = diagnose_control(ROWS, {"learned": _control(0.87), "rope": _control(0.94), "alibi": _control(0.95)})
    assert diag["status"] == "calibration" and diag["calibration"] == [["rope", "learned", 128]]
    assert not diag["flagged"] and "under-trained" in diag["finding"] and "87.0%" in diag["finding"]
    assert "HARNESS" not in diag["finding"] and "⚠" not in diag["finding"]


def test_a_gain_between_well_trained_models_stays_flagged():
    diag = diagnose_control(ROWS, {"learned": _control(0.995, 96.0), "rope": _control(0.999, 95.5),
                                   "alibi": _control(0.995)})
    assert diag["status"] == "failed" and diag["flagged"] == [["rope", "learned", 128]]
    assert "Control failed" in diag["finding"]
    below = diagnose_control(ROWS[1:], {"learned": _control(0.999, 96.0), "alibi": _control(0.999, 80.0)})
    assert below["status"] == "broken" and "Harness broken" in below["finding"]
    assert diagnose_control(ROWS[1:], {"learned": _control(0.9), "alibi": _control(0.9)})["status"] == "clean"


def test_pair_sentence_counts_the_structured_types_only():
    d = lambda lo, hi, eq, claim="below the claim": {"ci": (lo, hi), "equivalent": eq,  # noqa: E731
                                                      "significance": "better" if lo > 0 else (
                                                          "worse" if hi < 0 else "no significant difference"),
                                                      "claim_verdict": claim}
    per = {"linear_progression": d(0.5, 1.0, True), "code_hierarchy": d(16.0, 20.0, False, "within the claim"),
           "dialogue_structure": d(-1.0, 1.0, True), "random_content": d(5.0, 9.0, False)}
    text = pair_sentence("t", "b", per, list(per), 2.0, claims=True)
    assert "better on 2, worse on 0, no significant difference on 1 of 3 types" in text
    assert "equivalent within ±2% on 2 of 3" in text and "ruled out on 2 of 3" in text and "reached on 1" in text


def test_monitor_reads_steps_displacement_and_clamping():
    mon = TrajectoryMonitor()
    pos = torch.tensor([[0.0, 1.5, 3.0, 4.0, 0.0]])
    real = torch.tensor([[True, True, True, True, False]])  # the pad never counts
    mon.record_positions(pos, pos - torch.arange(5.0), real)
    mon.record_clamped(1)
    s = summarize(mon)
    steps = torch.tensor([1.5, 1.5, 1.0], dtype=torch.float64)
    assert s["step_mean"] == pytest.approx(float(steps.mean()))
    assert s["step_cv"] == pytest.approx(float(steps.std(unbiased=False) / steps.mean()))
    assert s["displacement_mean"] == pytest.approx((0 + 0.5 + 1.0 + 1.0) / 4) and s["displacement_max"] == 1.0
    assert s["clamped_share"] == pytest.approx(0.25)
    d = mon.as_dict()  # the same figures any user of the monitor logs
    assert d["steps"] == 3 and d["step_mean"] == s["step_mean"] and d["step_cv"] == s["step_cv"]
    empty = summarize(TrajectoryMonitor())
    assert empty["step_mean"] != empty["step_mean"], "no steps seen: NaN, not a measured-looking 0"
    assert mean_statistics([s, {**s, "displacement_max": 3.0}])["displacement_max"] == 3.0


def test_positions_of_a_patched_model_strength_zero_is_the_index():
    from transformers import GPT2Config, GPT2LMHeadModel

    import hf_trajpe

    def cfg():  # a fresh config per model: patching sets its attention implementation
        return GPT2Config(vocab_size=259, n_positions=64, n_embd=16, n_layer=1, n_head=2, bos_token_id=1,
                          eos_token_id=1)

    torch.manual_seed(0)
    ids = torch.randint(3, 200, (3, 24))
    flat = GPT2LMHeadModel(cfg())
    hf_trajpe.patch(flat, "trajectory", base="rope", strength=0.0)
    s = position_statistics(flat, ids, batch_size=2)
    assert s["step_mean"] == pytest.approx(1.0) and s["step_cv"] == pytest.approx(0.0, abs=1e-9)
    assert s["displacement_max"] == 0.0 and s["tokens"] == 72
    moving = GPT2LMHeadModel(cfg())
    hf_trajpe.patch(moving, "trajectory", base="rope", strength=0.3)
    s = position_statistics(moving, ids, batch_size=2)
    assert 1.0 < s["step_mean"] <= 1.3 and s["step_cv"] > 0 and s["displacement_max"] > 0
    assert position_statistics(GPT2LMHeadModel(cfg()), ids) is None  # not trajectory: nothing moves
