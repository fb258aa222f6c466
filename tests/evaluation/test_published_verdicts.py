"""The verdicts published under docs/results: none may rest on an interval bound that is 0 up to
floating-point noise (a "better" whose lower bound is 2.7e-17 is no difference)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hf_trajpe.evaluation.verdicts import ZERO_TOLERANCE

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def _verdicts(node, where: str = ""):
    """Every ``(where, ci, verdict)`` in a results JSON: a dict with a two-number ``ci`` and a verdict."""
    if isinstance(node, dict):
        ci, verdict = node.get("ci"), node.get("significance") or node.get("verdict")
        if (isinstance(verdict, str) and isinstance(ci, list) and len(ci) == 2
                and all(isinstance(b, (int, float)) for b in ci)):
            yield where, ci, verdict
        for key, value in node.items():
            yield from _verdicts(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _verdicts(value, f"{where}[{i}]")


def _claims_a_difference(verdict: str) -> bool:
    return verdict.startswith(("better", "worse"))


def test_the_scan_sees_a_difference_resting_on_a_bound_at_zero():
    node = {"tasks": {"x": {"ci": [2.7e-17, 0.11], "significance": "better"},
                      "y": {"ci": [0.01, 0.11], "significance": "better"},
                      "z": {"ci": [-0.02, 0.11], "significance": "no significant difference"}}}
    found = [(w, ci) for w, ci, v in _verdicts(node) if _claims_a_difference(v)
             and min(abs(ci[0]), abs(ci[1])) <= ZERO_TOLERANCE]
    assert found == [("/tasks/x", [2.7e-17, 0.11])]


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")), ids=lambda p: str(p.relative_to(RESULTS)))
def test_no_published_difference_rests_on_a_bound_within_the_zero_tolerance(path):
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        pytest.skip("not a JSON document")
    bad = [(where, ci, verdict) for where, ci, verdict in _verdicts(data) if _claims_a_difference(verdict)
           and (min(abs(ci[0]), abs(ci[1])) <= ZERO_TOLERANCE or ci[0] < 0 < ci[1])]
    assert not bad, f"{path}: verdicts of a difference whose interval touches or spans 0: {bad[:3]}"


_SEEDS = re.compile(r"over (\d+)(?: \+ (\d+))? seeds")


def _file_seeds(data) -> int | None:
    """The seeds of a results file's study, where its JSON says (its config, or the re-judging's ``seeds``)."""
    if not isinstance(data, dict):
        return None
    for node in (data, data.get("config"), (data.get("meta") or {}).get("config") if isinstance(data.get("meta"),
                                                                                              dict) else None):
        if isinstance(node, dict) and isinstance(node.get("seeds"), list):
            return len(node["seeds"])
    return None


def _seed_intervals(node, seeds: int | None, where: str = ""):
    """Every ``(where, seeds, node)`` whose ``ci`` rests on training seeds: a node with a p-value, a verdict,
    per-seed values or a method over seeds; ``seeds`` from its per-seed values, its method, or the file's
    config."""
    if isinstance(node, dict):
        ci, method = node.get("ci"), str(node.get("method", ""))
        if (isinstance(ci, list) and len(ci) == 2 and all(isinstance(b, (int, float)) for b in ci)
                and ({"p_value", "per_seed", "verdict", "significance"} & set(node) or "seed" in method)):
            found = _SEEDS.search(method)
            n = (len(node["per_seed"]) if isinstance(node.get("per_seed"), list)
                 else sum(int(g) for g in found.groups() if g) if found else 1 if method.startswith("one seed")
                 else seeds)
            yield where, n, node
        for key, value in node.items():
            yield from _seed_intervals(value, seeds, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _seed_intervals(value, seeds, f"{where}[{i}]")


def _certain_from_few_seeds(data) -> list[tuple[str, int, list, float | None]]:
    bad = []
    for where, n, node in _seed_intervals(data, _file_seeds(data)):
        if n is not None and n >= 5:  # unknown: held to the rule of fewer than 5
            continue
        ci, p = node["ci"], node.get("p_value")
        if ci[1] - ci[0] <= 0.0 or (isinstance(p, (int, float)) and p <= 0.0):
            bad.append((where, n, ci, p))
    return bad


def test_the_scan_sees_certainty_from_three_seeds_and_lets_five_agreeing_seeds_through():
    three = {"config": {"seeds": [0, 1, 2]},
             "x": {"ci": [1.0, 1.0], "p_value": 0.0, "method": "t over 3 seeds (paired by seed) plus examples"},
             "y": {"ci": [0.0, 1.0], "per_seed": [1.0, 1.0, 1.0]},
             "z": {"ci": [0.2, 0.4], "p_value": 0.01}}
    assert [w for w, *_ in _certain_from_few_seeds(three)] == ["/x"]
    five = {"config": {"seeds": [0, 1, 2, 3, 4]}, "x": {"ci": [0.3, 0.3], "p_value": 0.0}}
    assert _certain_from_few_seeds(five) == []


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")), ids=lambda p: str(p.relative_to(RESULTS)))
def test_no_published_interval_has_zero_width_or_p_zero_from_fewer_than_5_seeds(path):
    """Seeds that all agree do not make a result certain: with fewer than 5 seeds no interval the verdicts use
    has zero width and no p-value is 0 (:mod:`hf_trajpe.evaluation.seed_inference`)."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        pytest.skip("not a JSON document")
    bad = _certain_from_few_seeds(data)
    assert not bad, f"{path}: {len(bad)} intervals of zero width or p = 0 from fewer than 5 seeds: {bad[:3]}"
