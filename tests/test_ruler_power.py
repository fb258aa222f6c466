"""scripts/ruler_power.py: Connor's sample size for McNemar's test, against a hand computation and a simulation of
the test it sizes."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ruler_power", ROOT / "scripts" / "ruler_power.py")
ruler_power = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ruler_power)


def test_connors_formula_by_hand():
    # z(0.975) = 1.959964, z(0.8) = 0.841621; (1.959964 sqrt(0.3) + 0.841621 sqrt(0.26))^2 / 0.04 = 56.47
    want = (1.959964 * math.sqrt(0.3) + 0.841621 * math.sqrt(0.26)) ** 2 / 0.04
    assert ruler_power.prompts_needed(0.2, 0.8, 0.05, 0.3) == math.ceil(want) == 57
    assert ruler_power.prompts_needed(0.2, 0.8, 0.005, 0.3) > 57  # a stricter level needs more prompts
    with pytest.raises(ValueError, match="difference <= discordant"):
        ruler_power.prompts_needed(0.3, 0.8, 0.05, 0.2)


def test_the_size_gives_about_the_power_asked_for():
    """The asymptotic McNemar test at that size rejects about 80% of the time when the difference is there."""
    n = ruler_power.prompts_needed(0.2, 0.8, 0.05, 0.3)
    rng = np.random.default_rng(0)
    counts = rng.multinomial(n, [0.25, 0.05, 0.70], size=4000)[:, :2]
    b, c = counts[:, 0], counts[:, 1]
    statistic = (b - c) ** 2 / np.maximum(b + c, 1)
    power = float(np.mean(statistic > 1.959964 ** 2))
    assert 0.74 < power < 0.88


def test_the_screening_table_counts_means_costs_and_the_saved_tokens():
    spec = importlib.util.spec_from_file_location("ruler_screen_summary", ROOT / "scripts" / "ruler_screen_summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    rows = [{"task": "vt", "length": 4096, "score": s, "cpu_seconds": 10.0 * (i + 1), "generated_tokens": g,
             "max_new_tokens": 30} for i, (s, g) in enumerate([(1.0, 6), (0.0, 30), (0.5, 30)])]
    text = summary.table(rows)
    assert "| vt | 0.50 (3) | - | 20 / - | 66 of 90 |" in text
    assert "3 prompts; 66 tokens generated of a budget of 90 (27% saved" in text
