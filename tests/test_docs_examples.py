"""The Python examples of README.md and docs/*.md run as written.

Convention: every ```python block runs, unless the line before its fence is ``<!-- not-run: <reason> -->`` (a
fragment that needs a model or data from elsewhere, a GPU, a GGUF package, the network, or minutes of work).
The runnable blocks of one file run in order in one namespace, as a reader pastes them into one session, in a
temporary folder. Blocks that do not run are still parsed, and every ``hf_trajpe`` name they use (attribute
chains, ``from hf_trajpe... import ...``) must exist.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^<!-- not-run: (?P<reason>\S.*?) -->$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the reason, for a block that does not run


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            i += 1
            body = []
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            match = NOT_RUN.match(before)
            found.append(Block(path, start + 1, "\n".join(body) + "\n", match["reason"] if match else None))
        i += 1
    return found


ALL = [b for path in FILES for b in blocks(path)]
RUN_FILES = sorted({b.path for b in ALL if b.not_run is None})


def test_examples_are_found_and_every_marker_is_on_a_block():
    assert len(ALL) >= 10 and RUN_FILES, "the docs' python blocks are found"
    for path in FILES:
        text = path.read_text(encoding="utf-8").splitlines()
        markers = [n for n, line in enumerate(text, 1) if line.strip().startswith("<!-- not-run")]
        marked = {b.line for b in blocks(path) if b.not_run is not None}
        for n in markers:
            assert NOT_RUN.match(text[n - 1].strip()), f"{path.name}:{n}: write <!-- not-run: <reason> -->"
            following = next(m for m in range(n + 1, len(text) + 1) if text[m - 1].strip())
            assert following in marked, f"{path.name}:{n}: a not-run marker that is not before a python block"


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: p.name)
def test_the_runnable_examples_of_a_file_run_in_order(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace: dict = {"__name__": "__docs_example__"}
    for block in blocks(path):
        if block.not_run is None:
            code = compile(block.code, f"{path.name}:{block.line}", "exec")
            exec(code, namespace)  # noqa: S102 - the documented example itself


def _hf_trajpe_names(tree: ast.AST) -> list[tuple[str, str]]:
    """``(module, attribute)`` pairs the code takes from hf_trajpe: ``hf_trajpe.a.b`` chains and ``from
    hf_trajpe.x import y``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hf_trajpe":
            names.extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "hf_trajpe":
                chain.reverse()
                names.append(("hf_trajpe", ".".join(chain)))
    return names


@pytest.mark.parametrize("block", ALL, ids=lambda b: f"{b.path.name}:{b.line}")
def test_every_example_parses_and_names_what_hf_trajpe_has(block):
    tree = ast.parse(block.code, f"{block.path.name}:{block.line}")
    for module, dotted in _hf_trajpe_names(tree):
        value = importlib.import_module(module)
        for attr in dotted.split("."):
            if not hasattr(value, attr) and isinstance(value, types.ModuleType) and hasattr(value, "__path__"):
                with contextlib.suppress(ModuleNotFoundError):  # `from package import submodule`
                    importlib.import_module(f"{value.__name__}.{attr}")
            assert hasattr(value, attr), f"{block.path.name}:{block.line}: {module}.{dotted} does not exist"
            value = getattr(value, attr)


def test_every_submodule_is_reachable_after_import_hf_trajpe():
    """``hf_trajpe.loading.load_model`` (docs/lm_eval.md) right after ``import hf_trajpe``, in a fresh
    interpreter (in this one, other tests may have imported the submodules already)."""
    import subprocess
    import sys

    package = ROOT / "hf_trajpe"
    names = sorted(p.stem for p in package.glob("*.py") if not p.stem.startswith("_"))
    names += sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file())
    code = ("import hf_trajpe, sys\n"
            f"missing = [n for n in {names!r} if n not in dir(hf_trajpe)]\n"
            "assert not missing, missing\n"
            "assert callable(hf_trajpe.loading.load_model)\n"
            "print(hf_trajpe.loading.__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hf_trajpe.loading"
