"""The README is a front door kept true: its result tables equal what their files in docs/results give, it stays
short, and every file it links to exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _generator():
    spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts" / "readme_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_result_table_equals_its_file():
    gen = _generator()
    text = README.read_text()
    names = [m["name"] for m in gen.MARKER.finditer(text)]
    assert sorted(names) == sorted(gen.TABLES), "each renderer has one block in README.md and each block a renderer"
    _, changed = gen.render(text)
    assert not changed, f"README.md differs from docs/results in {changed}: run python scripts/readme_results.py"


@pytest.mark.parametrize("rel", ["docs/results/README.md", "docs/results/tasks/README.md",
                                 "docs/results/extension/README.md",
                                 "docs/results/ruler/smollm2_haystacks/README.md"])
def test_every_result_table_of_the_results_readmes_equals_its_file(rel):
    """The results' own READMEs: their tables (and the figures in them) are generated from the JSON beside them."""
    gen = _generator()
    text = (ROOT / rel).read_text()
    names = [m["name"] for m in gen.MARKER.finditer(text)]
    assert sorted(names) == sorted(gen.FILES[rel]), f"{rel}: each renderer has one block and each block a renderer"
    _, changed = gen.render(text, gen.FILES[rel])
    assert not changed, f"{rel} differs from docs/results in {changed}: run python scripts/readme_results.py"


def test_a_table_that_drifts_from_its_file_is_found(tmp_path):
    gen = _generator()
    text = README.read_text()
    drifted = text.replace("| stock | ", "| stock | 0.01 | ", 1)
    assert drifted != text
    assert gen.render(drifted)[1], "a hand-edited table must be reported"
    copy = tmp_path / "README.md"
    copy.write_text(drifted)
    assert gen.main(["--check", "--readme", str(copy)]) == 1
    assert gen.main(["--readme", str(copy)]) == 0 and gen.main(["--check", "--readme", str(copy)]) == 0
    assert copy.read_text() == text


def test_the_readme_is_a_front_door_not_a_manual():
    lines = README.read_text().splitlines()
    assert len(lines) <= 210, f"README.md has {len(lines)} lines: move detail to docs/ and link it"
    assert "make run" in README.read_text() and "make test" in README.read_text()


@pytest.mark.parametrize("doc", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_exists(doc):
    text = doc.read_text()
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (doc.parent / target).exists():
            missing.append(target)
    assert not missing, f"{doc.name} links to files that do not exist: {missing}"
