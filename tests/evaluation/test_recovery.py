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
    assert same["recovered"] is None and same["ci"] is None
    with pytest.raises(ValueError, match="same, non-empty chunks"):
        recovery_fraction((np.ones(2), 1), (np.ones(3), 1), (np.ones(3), 1))
