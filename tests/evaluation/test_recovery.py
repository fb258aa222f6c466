"""The recovered share of a swap's damage (hf_trajpe.evaluation.recovery), against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_trajpe.evaluation.recovery import recovery_fraction


def test_recovered_share_is_the_ratio_of_perplexity_differences():
    count = np.array([100, 100, 50])
    stock = (np.array([200.0, 210.0, 100.0]), count)  # 510 nats over 250 tokens
    swapped = (np.array([400.0, 380.0, 220.0]), count)  # 1000 nats
    tuned = (np.array([300.0, 290.0, 160.0]), count)  # 750 nats
    out = recovery_fraction(stock, swapped, tuned, n_resamples=500)
    p0, ps, pt = math.exp(510 / 250), math.exp(1000 / 250), math.exp(750 / 250)
    assert out["ppl_stock"] == pytest.approx(p0) and out["ppl_tuned"] == pytest.approx(pt)
    assert out["recovered"] == pytest.approx((ps - pt) / (ps - p0))
    lo, hi = out["ci"]
    assert lo <= out["recovered"] <= hi and out["n_chunks"] == 3


def test_chunks_that_agree_give_a_point_interval_and_no_damage_gives_none():
    count = np.full(6, 10)
    out = recovery_fraction((np.full(6, 10.0), count), (np.full(6, 30.0), count), (np.full(6, 20.0), count))
    want = (math.exp(3) - math.exp(2)) / (math.exp(3) - math.exp(1))
    assert out["recovered"] == pytest.approx(want) and out["ci"] == pytest.approx((want, want))
    same = recovery_fraction((np.full(6, 10.0), count), (np.full(6, 10.0), count), (np.full(6, 5.0), count))
    assert same["recovered"] is None and same["ci"] is None and same["status"] == "no damage"
    with pytest.raises(ValueError, match="same, non-empty chunks"):
        recovery_fraction((np.ones(2), 1), (np.ones(3), 1), (np.ones(3), 1))


def test_a_damage_within_the_chunk_noise_gives_no_share():
    """Chunks that disagree on the sign of a small damage: the share would divide by a resampled 0, so none is
    given; the damage itself gets its interval (across 0)."""
    count = np.full(4, 100)
    stock = (np.array([200.0, 200.0, 200.0, 200.0]), count)
    swapped = (np.array([230.0, 180.0, 215.0, 190.0]), count)  # +15 nats in all: a damage of 3.8%, sign varies
    tuned = (np.array([150.0, 150.0, 150.0, 150.0]), count)
    out = recovery_fraction(stock, swapped, tuned, n_resamples=500)
    assert out["damage"] == pytest.approx(math.exp(815 / 400) / math.exp(2) - 1)
    assert out["damage_ci"][0] < 0 < out["damage_ci"][1]
    assert out["recovered"] is None and out["ci"] is None and out["status"] == "damage not resolved"


def test_the_gap_to_the_unswapped_model_tuned_the_same_way():
    count = np.array([100, 100])
    stock = (np.array([200.0, 200.0]), count)
    swapped = (np.array([400.0, 400.0]), count)
    tuned = (np.array([220.0, 240.0]), count)  # 460 nats
    reference = (np.array([190.0, 190.0]), count)  # 380 nats
    out = recovery_fraction(stock, swapped, tuned, reference, n_resamples=500)
    assert out["gap"] == pytest.approx(math.exp(460 / 200 - 380 / 200) - 1)
    assert out["gap_ci"][0] == pytest.approx(math.exp(440 / 200 - 380 / 200) - 1)  # both chunks of the first kind
    assert out["gap_ci"][1] == pytest.approx(math.exp(480 / 200 - 380 / 200) - 1)
    assert out["ppl_reference"] == pytest.approx(math.exp(1.9)) and out["status"] == "resolved"
