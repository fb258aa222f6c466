"""The KV cache argument by the name the installed transformers takes (``cache`` from 5.24, ``past_key_values``
before; 5.24 to 5.39 take the old name with a ``FutureWarning``): the project's own calls go through
:func:`hf_trajpe.compat.cache_kwarg` and :func:`hf_trajpe.compat.output_cache`, and the docs that name the old
keyword name the new one beside it (which to write on which release)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a call passing the old keyword, or a read of the old output attribute (a warning property from 5.24)
OLD_NAME = re.compile(r"\bpast_key_values\s*=(?!=)|\.past_key_values\b")
#: the new keyword (not ``use_cache=``)
NEW_NAME = re.compile(r"(?<![\w.])cache=")
#: where the two names are told apart, by design
COMPAT = {ROOT / "hf_trajpe" / "compat.py", ROOT / "tests" / "test_compat.py", Path(__file__).resolve()}


def _old_names(folders: list[str]) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() in COMPAT:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if OLD_NAME.search(line.split("#", 1)[0]):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_the_projects_code_scripts_and_recipes_use_the_installed_name():
    assert _old_names(["hf_trajpe", "scripts", "recipes"]) == []


def test_the_tests_use_the_installed_name():
    assert _old_names(["tests"]) == []


def _blocks(text: str) -> list[str]:
    """Paragraphs, list items, headings and table rows of a Markdown text."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        starts = not line.strip() or re.match(r"\s{0,1}([-*#|]|\d+\. )", line)
        if starts or not blocks:
            blocks.append([])
        if line.strip():
            blocks[-1].append(line)
    return [" ".join(b) for b in blocks if b]


def test_docs_that_name_the_old_keyword_say_which_to_write_on_which_release():
    """The oldest tested release (5.23) has no ``cache=``: an example may name ``past_key_values=`` only beside
    ``cache=``."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    bare = [f"{page.relative_to(ROOT)}: {block[:100]}" for page in pages
            for block in _blocks(page.read_text(encoding="utf-8"))
            if "past_key_values=" in block and not NEW_NAME.search(block)]
    assert bare == []
