"""The recovered share of a swap's damage (hf_trajpe.evaluation.recovery), against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_trajpe.evaluation.recovery import recovery_fraction, recovery_over_seeds


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


def test_one_seed_over_seeds_is_the_chunk_interval_of_that_seed():
    count = np.array([100, 100, 50])
    stock, swapped = (np.array([200.0, 210.0, 100.0]), count), (np.array([400.0, 380.0, 220.0]), count)
    tuned, reference = (np.array([300.0, 290.0, 160.0]), count), (np.array([190.0, 205.0, 95.0]), count)
    one = recovery_over_seeds(stock, swapped, [tuned], [reference], n_resamples=300)
    alone = recovery_fraction(stock, swapped, tuned, reference, n_resamples=300)
    assert {k: one[k] for k in alone} == alone and one["seeds"] == 1


def test_the_gap_over_seeds_is_the_mean_log_ratio_paired_by_seed_with_a_t_interval():
    count = np.full(4, 100)
    stock, swapped = (np.full(4, 200.0), count), (np.full(4, 400.0), count)
    chunks = np.array([-6.0, 2.0, -2.0, 6.0])  # the chunks vary around each model's mean
    tuned = [(np.full(4, v) + chunks, count) for v in (220.0, 236.0, 228.0)]  # mean nats per token 2.2, 2.36, 2.28
    reference = [(np.full(4, v) + chunks, count) for v in (210.0, 210.0, 214.0)]
    out = recovery_over_seeds(stock, swapped, tuned, reference, n_resamples=400)
    gaps = np.array([0.10, 0.26, 0.14])  # log(ppl_tuned / ppl_reference) per seed
    assert out["gap"] == pytest.approx(math.expm1(gaps.mean()))
    assert [s["gap"] for s in out["per_seed"]] == pytest.approx(np.expm1(gaps).tolist())
    # the chunks move tuned and reference alike, so only the seeds' spread is left: t with 2 degrees of freedom
    half = 4.302652729911275 * gaps.std(ddof=1) / math.sqrt(3)
    assert out["gap_ci"] == pytest.approx((math.expm1(gaps.mean() - half), math.expm1(gaps.mean() + half)), rel=1e-6)
    shares = [(math.exp(4) - math.exp(v)) / (math.exp(4) - math.exp(2)) for v in (2.2, 2.36, 2.28)]
    assert out["recovered"] == pytest.approx(np.mean(shares)) and out["ci"][0] < out["recovered"] < out["ci"][1]
    assert out["seeds"] == 3 and out["damage"] == pytest.approx(math.exp(2) - 1)


def test_seeds_that_all_agree_never_give_a_zero_width_interval():
    count = np.full(4, 100)
    stock, swapped = (np.full(4, 200.0), count), (np.full(4, 400.0), count)
    tuned = [(np.full(4, 220.0), count)] * 3
    reference = [(np.full(4, 210.0), count)] * 3
    out = recovery_over_seeds(stock, swapped, tuned, reference, n_resamples=200)
    lo, hi = out["gap_ci"]
    assert out["gap"] == pytest.approx(math.expm1(0.1)) and hi - lo > 0.5  # three seeds cannot bound it
    assert out["ci"][1] - out["ci"][0] > 0.5
    with pytest.raises(ValueError, match="paired by seed"):
        recovery_over_seeds(stock, swapped, tuned, reference[:2])
