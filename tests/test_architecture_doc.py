"""docs/architecture.md stays true where a test can tell: its package table names every package folder of
hf_trajpe and nothing else, and every file or folder of the package it names in backticks exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _table() -> str:
    text = DOC.read_text()
    return text[text.index("<!-- packages:start -->"):text.index("<!-- packages:end -->")]


def test_every_package_has_a_row_and_every_row_is_a_package():
    packages = {str(p.parent.relative_to(ROOT)) + "/" for p in (ROOT / "hf_trajpe").rglob("__init__.py")}
    rows = set(re.findall(r"^\| `(hf_trajpe/[^`]*)` \|", _table(), re.M))
    assert rows - packages == set(), f"docs/architecture.md names packages that do not exist: {sorted(rows - packages)}"
    assert packages - rows == set(), f"packages missing from docs/architecture.md: {sorted(packages - rows)}"


def test_named_paths_of_the_package_exist():
    """A path is read from the repository root, the package, or a package folder (``schemes/`` inside
    ``patching/``, as the doc writes it)."""
    text = DOC.read_text()
    bases = [ROOT, *(p.parent for p in (ROOT / "hf_trajpe").rglob("__init__.py"))]
    missing = []
    for name in set(re.findall(r"`((?:[a-z_]+/)+(?:[a-z_]+\.(?:py|md))?)`", text)):
        if not any((base / name).exists() for base in bases):
            missing.append(name)
    assert not missing, f"docs/architecture.md names paths that do not exist: {sorted(missing)}"
