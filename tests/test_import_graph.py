"""No module of hf_trajpe imports one that imports it back, directly or through others.

Every ``import`` and ``from ... import`` anywhere in a file is an edge (lazy imports inside functions and
``TYPE_CHECKING`` blocks included): a cycle makes the import order decide what is defined, and a module that
cannot be understood without the modules that need it. Relative imports are resolved; ``from pkg import name``
where ``name`` is a submodule is an edge to that submodule; importing a package is an edge to its
``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_names(package_dir: Path) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package at ``package_dir`` (``__init__``: the package)."""
    out = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``."""
    modules = module_names(package_dir)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(name, is_package, node)
                targets = [target] + [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            else:
                continue
            for t in targets:
                while t and t not in modules:  # `import a.b.c` of a name inside a.b: the module a.b
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None (depth-first search, in sorted order for a stable answer)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_hf_trajpe_has_no_import_cycle():
    graph = import_graph(ROOT / "hf_trajpe")
    assert len(graph) > 50 and "hf_trajpe.study.engine" in graph["hf_trajpe.study"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "pkg"


def test_the_detector_finds_cycles_through_lazy_relative_and_package_imports(tmp_path):
    base = {"pkg/__init__.py": "", "pkg/sub/__init__.py": "from .b import B\n",
            "pkg/a.py": "def f():\n    from .sub import b\n", "pkg/sub/b.py": "B = 1\n"}
    assert find_cycle(import_graph(_package(tmp_path / "ok", base))) is None
    graph = import_graph(_package(tmp_path / "lazy", base | {"pkg/sub/b.py": "def g():\n    from .. import a\n"}))
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"} and "pkg.a" in graph["pkg.sub.b"]
    assert find_cycle(graph) == ["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"]
    typed = base | {"pkg/sub/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"}
    assert find_cycle(import_graph(_package(tmp_path / "typed", typed))) == ["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"]


def facade_uses(package_dir: Path) -> list[str]:
    """Modules of the package that reach a name through the package's lazy facade (``import hf_trajpe`` then
    ``hf_trajpe.patch``, or ``from hf_trajpe import patch`` inside the package): the facade imports nothing
    until first use, so such an edge is invisible to :func:`import_graph`. Only the facade's own names count
    (``__version__`` is defined in ``__init__`` itself)."""
    root = package_dir.name
    init = ast.parse((package_dir / "__init__.py").read_text())
    facade = next(ast.literal_eval(n.value) for n in init.body
                  if isinstance(n, ast.AnnAssign | ast.Assign)
                  and "__all__" in [t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target])])
    found = []
    for name, path in module_names(package_dir).items():
        if name == root:
            continue
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import) and any(a.name == root for a in node.names):
                found.append(f"{name}: import {root}")
            elif isinstance(node, ast.ImportFrom) and _resolve(name, is_package, node) == root:
                found += [f"{name}: from {root} import {a.name}" for a in node.names if a.name in facade]
    return sorted(found)


def test_no_module_inside_the_package_goes_through_the_facade():
    uses = facade_uses(ROOT / "hf_trajpe")
    assert not uses, "import the defining module instead (from ..patching import patch): " + "; ".join(uses)


def test_the_facade_check_sees_both_forms(tmp_path):
    files = {"pkg/__init__.py": '__all__ = ["patch"]\n__version__ = "1"\n', "pkg/sub/__init__.py": "",
             "pkg/sub/a.py": "def f():\n    import pkg\n    return pkg.patch\n",
             "pkg/sub/b.py": "from .. import patch, __version__\n", "pkg/sub/c.py": "from .. import __version__\n"}
    assert facade_uses(_package(tmp_path, files)) == ["pkg.sub.a: import pkg", "pkg.sub.b: from pkg import patch"]


# -- the layers of docs/architecture.md -------------------------------------------------------------------------
#: the top-level modules and packages of hf_trajpe, bottom up as docs/architecture.md draws them: a module imports
#: from its own layer and the layers below (the facade, ``hf_trajpe/__init__``, imports nothing until first use)
LAYERS = (
    {"checks", "compat", "precision", "monitoring", "content", "loading", "paths", "strength"},
    {"encodings"},
    {"cache"},
    {"patching"},
    {"data"},
    {"evaluation"},
    {"training"},
    {"study", "benchmarks", "coverage", "integrations", "extension"},
    {"commands"},
    {"cli", "__main__"},
)
#: the engine of patching/: it asks a scheme what to do and never imports a scheme's own modules
CORE = ("plan", "state", "attention")


def _rank(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the lazy facade
    return next(i for i, layer in enumerate(LAYERS) if parts[1] in layer)


def test_every_module_imports_from_its_layer_or_below():
    graph = import_graph(ROOT / "hf_trajpe")
    assert {m.split(".")[1] for m in graph if "." in m} == set().union(*LAYERS), "a new top-level module: give a layer"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if _rank(a) is not None and _rank(b) is not None and _rank(b) > _rank(a))
    assert not upward, "imports from a higher layer (docs/architecture.md): " + "; ".join(upward)


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_patching_core_names_no_remap_and_schemes_never_reach_the_core():
    """plan.py, state.py and attention.py import no module of the remap package (they ask the scheme:
    ``Scheme.attend``, ``rotate_new_keys``, ``read_units``, the model checks); schemes/ and families/ are built
    from a plan and import nothing that reaches the plan, the state or the attention functions."""
    graph = import_graph(ROOT / "hf_trajpe")
    remap = "hf_trajpe.patching.schemes.remap"
    for name in CORE:
        module = f"hf_trajpe.patching.{name}"
        named = sorted(t for t in graph[module] if t == remap or t.startswith(remap + "."))
        assert not named, f"{module} imports the remap package: {named}"
    core = {f"hf_trajpe.patching.{name}" for name in CORE}
    plugins = [m for m in graph if m.startswith(("hf_trajpe.patching.schemes", "hf_trajpe.patching.families"))]
    assert any(m.startswith(remap + ".kernels") for m in plugins)
    for module in plugins:
        reached = _reaches(graph, module) & core
        assert not reached, f"{module} reaches the patching core {sorted(reached)}"
