"""Content-type datasets: registry, determinism, sizes, disjoint splits and each type's property."""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import re
import zlib
from collections import Counter

import pytest

from hf_trajpe.content import CONTENT_TYPES
from hf_trajpe.data import CONTENT_TYPE_REGISTRY, build_dataset
from hf_trajpe.data.code import file_chunks
from hf_trajpe.data.random_content import ALPHABET

SMALL = dict(train=24, validation=6, test=6)


@pytest.fixture(scope="module")
def small():
    return {name: build_dataset(name, seed=0, **SMALL) for name in CONTENT_TYPES}


def _all_rows(dd):
    return [row for split in ("train", "validation", "test") for row in dd[split]]


def test_registry_matches_spec_types():
    from hf_trajpe.data.registry import names

    assert names() == list(CONTENT_TYPES)  # the study's mix and every default: the seven, in the spec's order
    extra = {n: c for n, c in CONTENT_TYPE_REGISTRY.items() if n not in CONTENT_TYPES}
    assert {n: c.default for n, c in extra.items()} == {"real_text": False}  # used only where named


@pytest.mark.parametrize("name", CONTENT_TYPES)
def test_sizes_columns_and_min_length(small, name):
    dd = small[name]
    assert {k: dd[k].num_rows for k in dd} == SMALL
    assert dd["train"].column_names == ["text", "source"]
    assert all(len(r["text"]) >= 768 for r in _all_rows(dd))


@pytest.mark.parametrize("name", CONTENT_TYPES)
def test_deterministic_given_seed(small, name):
    again = build_dataset(name, seed=0, **SMALL)
    other = build_dataset(name, seed=1, **SMALL)
    assert again["train"]["text"] == small[name]["train"]["text"]
    assert again["test"]["text"] == small[name]["test"]["text"]
    assert other["test"]["text"] != small[name]["test"]["text"]


@pytest.mark.parametrize("name", CONTENT_TYPES)
def test_splits_do_not_overlap(small, name):
    dd = small[name]
    texts = [set(dd[s]["text"]) for s in ("train", "validation", "test")]
    assert sum(map(len, texts)) == sum(SMALL.values())  # no duplicate inside a split either
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])


@pytest.mark.parametrize("name", ["linear_progression", "code_hierarchy"])
def test_test_split_does_not_depend_on_train_size(small, name):
    bigger = build_dataset(name, seed=0, train=40, validation=6, test=6)
    assert bigger["test"]["text"] == small[name]["test"]["text"]


# ---- linear_progression: the leading quantity advances by one constant step ----

_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _constant_step(values) -> bool:
    diffs = {round(b - a, 6) for a, b in zip(values, values[1:], strict=False)}
    return len(values) >= 5 and len(diffs) == 1 and diffs != {0}


def _linear_values(text: str, fmt: str) -> list[list[float]]:
    body = text.splitlines()[1:]
    if fmt == "series":
        return [[float(x) for x in _NUM.findall(" ".join(body))]]
    if fmt == "log":
        times = [dt.datetime.strptime(line[:16], "%Y-%m-%d %H:%M").timestamp() for line in body]
        counters = [float(line.rsplit("#", 1)[1]) for line in body]
        return [times, counters]
    if fmt == "steps":
        return [[float(_NUM.match(line.removeprefix("Step ")).group()) for line in body]]
    if fmt == "table":
        pairs = [_NUM.findall(line)[:2] for line in body]
        return [[float(a) for a, _ in pairs], [float(b) for _, b in pairs]]
    raise AssertionError(fmt)


def test_linear_advances_by_steady_steps(small):
    rows = _all_rows(small["linear_progression"])
    assert len({r["source"] for r in rows}) >= 3  # several formats
    for r in rows:
        fmt = r["source"].rsplit("/", 1)[1]
        for values in _linear_values(r["text"], fmt):
            assert _constant_step(values), (fmt, values[:8])


def test_linear_check_rejects_a_broken_series():
    assert not _constant_step([1, 2, 3, 5, 6, 7])


# ---- convergent_flow: the parts add up to the total / the conclusion joins first and last ----

def _check_block(block: str, kind: str) -> None:
    lines = block.splitlines()
    if kind == "sum":
        parts, total = block.split(" = ")
        assert sum(int(x) for x in parts.split(" + ")) == int(total)
    elif kind == "invoice":
        amounts = [float(line.rsplit(" = ", 1)[1]) for line in lines[1:-1]]
        for line in lines[1:-1]:
            qty, rest = line.split(" x ", 1)
            price = float(rest.split(" at ")[1].split(" = ")[0])
            assert round(int(qty) * price, 2) == float(line.rsplit(" = ", 1)[1])
        assert round(sum(amounts), 2) == float(lines[-1].removeprefix("Total: "))
    elif kind == "syllogism":
        first = re.match(r"All (.+) are (.+)\.", lines[0]).group(1)
        last = re.match(r"All (.+) are (.+)\.", lines[-2]).group(2)
        assert lines[-1].endswith(f", all {first} are {last}.")
    elif kind == "report":
        counts = [int(_NUM.search(line).group()) for line in lines[:-1]]
        assert int(_NUM.search(lines[-1]).group()) == sum(counts)
    else:
        raise AssertionError(kind)


def test_convergent_parts_reduce_to_the_stated_whole(small):
    kinds_seen = set()
    for r in _all_rows(small["convergent_flow"]):
        kinds = r["source"].split("/", 1)[1].split(",")
        blocks = r["text"].split("\n\n")
        assert len(blocks) == len(kinds)
        for block, kind in zip(blocks, kinds, strict=True):
            _check_block(block, kind)
            kinds_seen.add(kind)
    assert kinds_seen == {"sum", "invoice", "syllogism", "report"}


def test_convergent_check_catches_a_wrong_total():
    with pytest.raises(AssertionError):
        _check_block("1 + 2 + 3 = 7", "sum")


# ---- circular_patterns: a detectable period ----

def lag_scores(units: list[str]) -> dict[int, float]:
    """For each lag 1..n/2, the share of units equal to the unit that many places earlier."""
    n = len(units)
    return {lag: sum(units[i] == units[i - lag] for i in range(lag, n)) / (n - lag) for lag in range(1, n // 2 + 1)}


def detected_period(units: list[str], threshold: float) -> int | None:
    """The smallest lag whose share reaches ``threshold`` (None: no period)."""
    return next((lag for lag, s in lag_scores(units).items() if s >= threshold), None)


def _units(text: str, fmt: str) -> list[str]:
    return text.splitlines() if fmt == "refrain" else text.split()


def test_circular_has_the_period_it_claims(small):
    for r in _all_rows(small["circular_patterns"]):
        _, fmt, period = r["source"].split("/")
        claimed = int(period.removeprefix("period="))
        units = _units(r["text"], fmt)
        if fmt == "cycle":  # a "Monday: wash the cup." entry is several words; compare entries
            units = re.findall(r"[A-Za-z]+: [^.]+\.", r["text"])
        assert detected_period(units, 0.4 if fmt == "refrain" else 0.85) == claimed, fmt


def test_random_content_has_no_period(small):
    for text in small["random_content"]["test"]["text"]:
        assert detected_period(list(text), 0.05) is None


# ---- divergent_expansion: one root, every node's parent comes first, real branching ----

def _tree_edges(text: str, fmt: str) -> list[tuple[str, str]]:
    lines = text.splitlines()
    edges = []
    if fmt == "bfs":
        for line in lines:
            parent, kids = line.split(" -> ")
            edges += [(parent, k) for k in kids.split(", ")]
        return edges
    stack = [lines[0].lower()]
    for line in lines[1:]:
        if fmt == "outline":
            number, label = line.strip().split(" ", 1)
            depth = number.count(".")
        else:
            m = re.match(r"^((?:│   |    )*)(├── |└── )(.+)$", line)
            depth, label = len(m.group(1)) // 4 + 1, m.group(3)
        assert 1 <= depth <= len(stack), line
        stack = stack[:depth]
        edges.append((stack[-1], label))
        stack.append(label)
    return edges


def test_divergent_is_one_root_expanded_into_branches(small):
    formats = set()
    for r in _all_rows(small["divergent_expansion"]):
        fmt = r["source"].rsplit("/", 1)[1]
        formats.add(fmt)
        edges = _tree_edges(r["text"], fmt)
        root = edges[0][0]
        known = {root}
        for parent, child in edges:
            assert parent in known, (fmt, parent)  # the parent was introduced before the child
            known.add(child)
        fan_out = Counter(p for p, _ in edges)
        assert max(fan_out.values()) >= 2 and len(edges) >= 8
    assert formats == {"outline", "tree", "bfs"}


def test_outline_numbering_matches_depth(small):
    for r in _all_rows(small["divergent_expansion"]):
        if r["source"].endswith("/outline"):
            for line in r["text"].splitlines()[1:]:
                indent = len(line) - len(line.lstrip(" "))
                assert line.strip().split(" ", 1)[0].count(".") == indent // 2 + 1


# ---- dialogue_structure: two speakers alternate ----

def test_dialogue_alternates_two_speakers(small):
    for r in _all_rows(small["dialogue_structure"]):
        speakers = [line.split(":", 1)[0] for line in r["text"].splitlines()]
        assert len(set(speakers)) == 2
        assert all(a != b for a, b in zip(speakers, speakers[1:], strict=False))
        assert r["source"].endswith("|".join(speakers[:2]))


# ---- code_hierarchy: real, compilable, nested source; nested JSON; files never shared ----

def _depth(obj) -> int:
    if isinstance(obj, dict):
        return 1 + max(map(_depth, obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max(map(_depth, obj), default=0)
    return 0


def test_code_is_real_nested_python_or_nested_json(small):
    rows = _all_rows(small["code_hierarchy"])
    python = [r for r in rows if r["source"].startswith("stdlib:")]
    assert len(python) >= 0.6 * len(rows)
    for r in python:
        compile(r["text"], r["source"], "exec")  # every chunk is whole statements
    nested = sum(any(isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.If, ast.For, ast.With))
                     for n in ast.walk(ast.parse(r["text"]))) for r in python)
    assert nested >= 0.8 * len(python)
    for r in rows:
        if r["source"] == "generated:json":
            assert _depth(json.loads(r["text"])) >= 3


def test_code_splits_never_share_a_source_file(small):
    dd = small["code_hierarchy"]
    files = [{s for s in dd[split]["source"] if s.startswith("stdlib:")} for split in ("train", "validation", "test")]
    assert not (files[0] & files[1] or files[0] & files[2] or files[1] & files[2])


def test_file_chunks_cut_a_long_class_at_its_methods(tmp_path):
    methods = "\n\n".join(f"    def m{i}(self):\n        return {i}" + " + 1" * 60 for i in range(20))
    path = tmp_path / "mod.py"
    path.write_text(f"import os\n\n\nclass Big(object):\n    '''Doc.'''\n\n{methods}\n")
    chunks = file_chunks(path, min_chars=300, max_chars=1000)
    assert len(chunks) >= 5
    for chunk in chunks:
        assert chunk.startswith("class Big(object):\n")
        compile(chunk, "chunk", "exec")


# ---- random_content: near-uniform over the printable alphabet ----

def test_random_content_is_near_uniform(small):
    text = "".join(_all_rows(small["random_content"])[i]["text"] for i in range(36))
    assert set(text) <= set(ALPHABET)
    counts = Counter(text)
    n, k = len(text), len(ALPHABET)
    chi2 = sum((counts.get(c, 0) - n / k) ** 2 / (n / k) for c in ALPHABET)
    # chi-square with 94 degrees of freedom: mean 94, sd 13.7; 160 is beyond 4.8 sd
    assert chi2 < 160, chi2
    entropy = -sum(c / n * math.log(c / n) for c in counts.values())
    assert entropy > 0.995 * math.log(k)
    assert len(zlib.compress(text.encode(), 9)) / n > 0.8


def test_uniformity_check_would_catch_a_skewed_alphabet():
    text = "a" * 2000 + ALPHABET * 100
    counts = Counter(text)
    n, k = len(text), len(ALPHABET)
    assert sum((counts.get(c, 0) - n / k) ** 2 / (n / k) for c in ALPHABET) > 160


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        build_dataset("random_content", train=-1)
    with pytest.raises(ValueError, match="unknown content type"):
        build_dataset("poetry")
