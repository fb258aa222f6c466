"""The verdicts published under docs/results: none may rest on an interval bound that is 0 up to
floating-point noise (a "better" whose lower bound is 2.7e-17 is no difference)."""

from __future__ import annotations

import json
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
