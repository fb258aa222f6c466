"""Sentences of the docs that quote stored results say no more than the files give: the README's generated
caveats (a prediction interval where a range of three seeds was read as a test, kinds of text counted as well as
prompts, the extension that finds nothing named, dynamic NTK's factor in effect), the bold of the SmolLM2 32k
table, and the remap cost column of docs/patching.md against the benchmark's JSON."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def _generator():
    spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts" / "readme_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_prediction_interval_is_students_for_one_more_run():
    low, high = _generator().prediction_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 * math.sqrt(1 + 1 / 3)  # t(0.975, 2), sd 1
    assert (low, high) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-6)


def test_the_first_recovery_run_is_not_called_outside_seed_noise_by_a_range_of_three():
    """Three seeds' range (12.88-12.99) is no test of a fourth run's 12.69; the same seed ending elsewhere is."""
    text = _generator().recovery()
    assert "not seed noise" not in text
    assert "is inside the 95% prediction interval" in text
    assert "it used seed 0, which now ends at 12.99" in text


def test_kinds_of_text_are_counted_beside_prompts():
    gen = _generator()
    # three values below all seven others: 1 of C(10, 3) = 120 picks, doubled
    assert gen.rank_test_low([0.4] * 3, [1.0, 0.9, 0.8, 0.8, 0.7, 0.6, 0.6]) == pytest.approx(2 / 120)
    assert gen.rank_test_low([5.0, 6.0], [1.0, 2.0, 3.0]) == 1.0
    assert "p = 0.017 counting kinds of text" in gen.ruler_haystacks()


def test_an_extension_that_finds_nothing_is_not_among_those_said_to_be_unordered():
    text = _generator().ruler()
    assert "string found none at 16k" in text
    assert "cannot order the other extensions" in text


def test_dynamic_ntk_read_in_one_forward_names_its_factor_in_effect():
    text = _generator().extension_remap()
    assert "dynamic NTK x2 and dynamic NTK x4 are NTK at factors 3 and 13" in text


def _table(text: str, header_start: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_bold_of_the_smollm2_32k_table_is_the_lowest_of_each_column():
    text = (RESULTS / "extension" / "remap_smollm2" / "README.md").read_text()
    rows = _table(text, "| method | 0-8k | 8k-12k | 12k-16k | 16k-24k | 24k-32k | CPU s |")
    for col in range(1, 6):
        values = {r[0]: float(r[col].strip("*")) for r in rows}
        bold = {r[0] for r in rows if r[col].startswith("**")}
        lowest = min(values.values())
        assert bold == {name for name, v in values.items() if v == lowest}, f"column {col}: bold {bold}"


#: the cost column's words -> the benchmark's target of the same measure
COST_TARGETS = {"prefill": "remap_time", "decoding": "remap_decode", "memory": "remap_memory"}


@pytest.mark.parametrize("method", ["self_extend", "rerope", "dca", "string"])
def test_the_remap_cost_column_is_the_benchmark_run(method):
    """docs/patching.md's figures equal docs/results/bench/bench.json's (rounded as shown), so a new run that is
    not copied there is found."""
    measured = {t["target"]: t["measured"] for t in json.loads((RESULTS / "bench" / "bench.json").read_text())[
        "targets"] if t["variant"] == method and t["target"] in COST_TARGETS.values()}
    doc = (ROOT / "docs" / "patching.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith(f"| `{method}` ("))
    cost = [c.strip() for c in row.strip("|").split("|")][3]
    for word, target in COST_TARGETS.items():
        found = re.search(rf"{word} (\d+\.\d+)x", cost)
        assert found, f"docs/patching.md, {method}: the cost column gives no {word} figure: {cost!r}"
        assert float(found[1]) == round(measured[target], 2), (
            f"docs/patching.md, {method}: {word} {found[1]}x, the benchmark gives {measured[target]:.2f}")
