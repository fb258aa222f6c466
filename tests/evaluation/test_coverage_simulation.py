"""The false-"different" rate of every path that publishes a verdict, simulated on equal models where three
seeds mislead most: at the floor, at the ceiling, with no spread over seeds at all, and with seeds that either
learn or do not (bimodal); plus a typical case. Each path runs as its report runs it: the task study
(:func:`paired_difference` and :func:`judge_family`), the content study (:func:`delta_with_intervals` and
:func:`judge_deltas`), its re-judging from a published JSON (:func:`rejudge_delta`), the extension study
(:func:`compare` and :func:`adjust`) and the recovery study's gap over seeds (:func:`recovery_over_seeds`), each at
the seed count of its published study (3, 3, 3, 5 and 3).

Equal models are called different at most 5% of the time, give or take two simulation standard errors; no
interval has zero width and no p-value is 0; no comparison whose seeds all agree is called equivalent.
``-m slow`` runs the same with ten times the simulated studies (about a minute)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_trajpe.evaluation.answers import paired_difference
from hf_trajpe.evaluation.bootstrap import delta_with_intervals
from hf_trajpe.evaluation.evaluate_models import judge_deltas
from hf_trajpe.evaluation.recovery import recovery_over_seeds
from hf_trajpe.evaluation.verdicts import NO_DIFFERENCE, judge_family
from hf_trajpe.study.suites.content.rejudge import rejudge_delta
from hf_trajpe.study.suites.extension.eval import adjust, compare

SCENARIOS = ("typical", "floor", "ceiling", "zero_spread", "bimodal")
NOMINAL = 0.05


def _accuracies(scenario: str, seeds: int, rng: np.random.Generator) -> np.ndarray:
    """One model's ``[seeds, 1]`` success probability per seed (per example: its difficulty added)."""
    if scenario == "bimodal":  # each seed learns the task (97%) or does not (3%), half the time each
        return np.where(rng.random((seeds, 1)) < 0.5, 0.97, 0.03)
    if scenario in ("floor", "ceiling"):
        p = np.clip(rng.normal(0.02, 0.015, (seeds, 1)), 0.0, 1.0)
        return p if scenario == "floor" else 1.0 - p
    return np.clip(rng.normal(0.5, 0.1, (seeds, 1)), 0.0, 1.0)


def _scores(scenario: str, seeds: int, rng: np.random.Generator, n: int = 100) -> np.ndarray:
    """``[seeds, n]`` 0/1 outcomes of one model; ``zero_spread``: one draw of outcomes repeated for every seed
    (a model that training reaches whatever the seed)."""
    if scenario == "zero_spread":
        return np.repeat((rng.random((1, n)) < rng.uniform(0.2, 0.8, n)).astype(np.float64), seeds, axis=0)
    difficulty = rng.normal(0.0, 0.1, n) if scenario == "typical" else 0.0
    return (rng.random((seeds, n)) < np.clip(_accuracies(scenario, seeds, rng) + difficulty, 0, 1)).astype(np.float64)


def _losses(scenario: str, seeds: int, rng: np.random.Generator, sequences: np.ndarray) -> np.ndarray:
    """``[seeds, n]`` mean token losses of one model on shared test sequences (``sequences``: each one's
    difficulty). Floor: both at the uniform loss of 259 symbols, up to rounding; ceiling: near 0."""
    n = sequences.size
    if scenario == "floor":
        return math.log(259.0) + rng.normal(0.0, 1e-4, (seeds, n))
    if scenario == "ceiling":
        return np.abs(0.01 + rng.normal(0.0, 0.002, (seeds, 1)) + rng.normal(0.0, 0.002, (seeds, n)))
    if scenario == "zero_spread":
        return np.repeat(1.5 + sequences + rng.normal(0.0, 0.05, (1, n)), seeds, axis=0)
    if scenario == "bimodal":
        level = np.where(rng.random((seeds, 1)) < 0.5, 1.0, 2.5)
        return level + sequences + rng.normal(0.0, 0.05, (seeds, n))
    return 1.5 + sequences + rng.normal(0.0, 0.05, (seeds, 1)) + rng.normal(0.0, 0.05, (seeds, n))


def _task_path(scenario: str, rng: np.random.Generator, k: int) -> dict:
    d = paired_difference(_scores(scenario, 3, rng), _scores(scenario, 3, rng), n_resamples=100, seed=k)
    judge_family([d], "difference", 2.0, unit=" points", scale=100.0)
    return d


def _content_pair(scenario: str, rng: np.random.Generator, k: int, seeds: int = 3, n: int = 24):
    sequences = rng.normal(0.0, 0.3, n)
    count = np.full(n, 128.0)
    base, enc = (_losses(scenario, seeds, rng, sequences) * count for _ in range(2))
    return base, enc, count, delta_with_intervals(base, count, enc, count, n_resamples=60, seed=k)


def _content_path(scenario: str, rng: np.random.Generator, k: int) -> dict:
    d = _content_pair(scenario, rng, k)[3]
    judge_deltas([("model", "reference", {"type": {"128": d}})], 2.0)
    return d


def _rejudge_path(scenario: str, rng: np.random.Generator, k: int) -> dict:
    base, enc, count, published = _content_pair(scenario, rng, k)
    seeds_b, seeds_e = (np.exp(x.sum(1) / count.sum()).tolist() for x in (base, enc))
    d = rejudge_delta({key: published[key] for key in ("delta_pct", "ci_sequences", "level")}, seeds_b, seeds_e)
    judge_deltas([("model", "reference", {"type": {"128": d}})], 2.0)
    return d


def _extension_path(scenario: str, rng: np.random.Generator, k: int) -> dict:
    sequences = rng.normal(0.0, 0.3, 16)
    model, reference = (list(_losses(scenario, 5, rng, sequences)) for _ in range(2))
    c = compare(model, reference, 5.0)
    adjust([c], 0.95, "bh")
    c["significance"] = NO_DIFFERENCE if not c["verdict"].startswith(("better", "worse")) else c["verdict"]
    c["equivalent"] = "; equivalent" in c["verdict"] or "yet equivalent" in c["verdict"]
    return c


def _recovery_path(scenario: str, rng: np.random.Generator, k: int) -> dict:
    """The recovery study's gap over 3 seeds: a swapped model tuned per seed against the stock model tuned per seed
    with the same seed, on 8 shared test chunks (the report gives the interval; a gap whose interval leaves 0
    reads as a difference)."""
    sequences = rng.normal(0.0, 0.3, 8)
    count = np.full(8, 256.0)
    tuned, reference = (_losses(scenario, 3, rng, sequences) * count for _ in range(2))
    stock, swapped = (1.5 + sequences) * count, (2.0 + sequences) * count
    r = recovery_over_seeds((stock, count), (swapped, count), [(t, count) for t in tuned],
                            [(t, count) for t in reference], n_resamples=100, seed=k)
    lo, hi = r["gap_ci"]
    return {"ci": (lo, hi), "p_value": r["gap_p_value"], "significance": NO_DIFFERENCE if lo <= 0.0 <= hi else "gap",
            "zero_spread": r["gap_zero_spread"], "equivalent": False}


PATHS = {"tasks": _task_path, "content": _content_path, "rejudge": _rejudge_path, "extension": _extension_path,
         "recovery": _recovery_path}


def _simulate(path: str, scenario: str, runs: int, seed: int = 0) -> dict:
    rng = np.random.default_rng([seed, list(PATHS).index(path), SCENARIOS.index(scenario)])
    called = zero_width = p_zero = equivalent_without_spread = 0
    for k in range(runs):
        d = PATHS[path](scenario, rng, k)
        called += not d.get("degenerate") and d["significance"] != NO_DIFFERENCE
        zero_width += d["ci"][1] - d["ci"][0] <= 0.0
        p_zero += d["p_value"] <= 0.0
        equivalent_without_spread += bool(d.get("zero_spread") and d["equivalent"])
    return {"rate": called / runs, "zero_width": zero_width, "p_zero": p_zero,
            "equivalent_without_spread": equivalent_without_spread}


def _allowed(runs: int) -> float:
    return NOMINAL + 2.0 * math.sqrt(NOMINAL * (1.0 - NOMINAL) / runs)


def _check(path: str, scenario: str, runs: int) -> None:
    got = _simulate(path, scenario, runs)
    assert got["rate"] <= _allowed(runs), f"{path}, {scenario}: equal models called different {got['rate']:.1%}"
    assert got["zero_width"] == 0 and got["p_zero"] == 0, f"{path}, {scenario}: {got}"
    assert got["equivalent_without_spread"] == 0, f"{path}, {scenario}: {got}"


RUNS = {"tasks": 120, "content": 60, "rejudge": 60, "extension": 120, "recovery": 120}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("path", list(PATHS))
def test_equal_models_are_called_different_at_most_5_percent_on_every_published_path(path, scenario):
    _check(path, scenario, RUNS[path])


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("path", list(PATHS))
def test_the_same_with_ten_times_the_simulated_studies(path, scenario):
    _check(path, scenario, 10 * RUNS[path])


def test_the_zero_spread_scenario_is_the_one_that_broke_the_old_t_interval():
    """Outcomes that repeat for every seed: the per-seed differences are all equal, which t read as certainty
    (p = 0 whenever the two draws differed). Now every such comparison carries the sign-flip bound."""
    rng = np.random.default_rng(5)
    for k in range(10):
        d = _task_path("zero_spread", rng, k)
        assert d["zero_spread"] and d["p_value"] >= 0.25 and not d["equivalent"]
        assert d["ci"] == (-1.0, 1.0)
