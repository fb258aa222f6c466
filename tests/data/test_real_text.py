"""The real_text type: man pages to plain text, docstrings, and splits by file (test disjoint from train)."""

from __future__ import annotations

import gzip
import warnings
from collections import Counter

import pytest

from hf_trajpe.data import real_text
from hf_trajpe.data.registry import names

ROFF = r""".\" a comment that must not show
.TH LS 1 "2024" "GNU coreutils"
.SH NAME
ls \- list directory contents
.SH SYNOPSIS
.B ls
[\fIOPTION\fR]... [\fIFILE\fR]...
.PP
Sort entries \(em alphabetically \(lqby default\(rq; see \fBdir\fP(1).
.so man1/other.1
"""


def test_man_to_text_keeps_the_words_and_drops_requests_comments_and_escapes():
    text = real_text.man_to_text(ROFF)
    assert text.splitlines()[:4] == ["NAME", "ls - list directory contents", "SYNOPSIS", "ls"]
    assert "[OPTION]... [FILE]..." in text
    assert 'Sort entries -- alphabetically "by default"; see dir(1).' in text
    assert "comment" not in text and "\\" not in text and "coreutils" not in text and ".so" not in text


def test_docstrings_of_a_module_in_source_order():
    source = '"""Module doc."""\n\nclass A:\n    """Class doc."""\n\n    def f(self):\n        """Method doc."""\n'
    assert real_text.docstrings_text(source) == "Module doc.\n\nClass doc.\n\nMethod doc."
    assert real_text.docstrings_text("def broken(:\n") == ""


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A small machine: 40 modules, 6 licences, 30 man pages (one a .so link)."""
    lib, lic, man = tmp_path / "lib", tmp_path / "licenses", tmp_path / "man"
    for i in range(40):
        (lib / f"pkg{i % 4}").mkdir(parents=True, exist_ok=True)
        (lib / f"pkg{i % 4}" / f"mod{i}.py").write_text(f'"""Module {i} {"explains " * 40}."""\n\n'
                                                        f"def f{i}():\n    \"\"\"Function {i} {'does ' * 40}\"\"\"\n")
    (lib / "tests").mkdir()
    (lib / "tests" / "test_skip.py").write_text('"""never used"""\n' * 50)
    lic.mkdir()
    for i in range(6):
        (lic / f"LICENSE-{i}").write_text(f"Licence {i}. " * 60)
    (man / "man1").mkdir(parents=True)
    for i in range(30):
        body = ".so man1/x.1\n" if i == 0 else f".SH NAME\ntool{i} \\- does things\n" + "Some words here.\n" * 30
        (man / "man1" / f"tool{i}.1.gz").write_bytes(gzip.compress(body.encode()))
    for i in range(1, 30):  # links: other names of pages read under their own names (skipped)
        (man / "man1" / f"alias{i}.1.gz").symlink_to(man / "man1" / f"tool{i}.1.gz")
    (lic / "LICENSE").symlink_to(lic / "LICENSE-0")
    monkeypatch.setattr(real_text, "stdlib_dir", lambda: lib)
    monkeypatch.setattr(real_text, "LICENSE_DIR", lic)
    monkeypatch.setattr(real_text, "MAN_DIR", man)
    return tmp_path


def _files(rows):
    return {r["source"].split(":", 1)[1] for r in rows}


def test_splits_are_by_file_deterministic_and_mix_the_kinds(machine):
    sizes = {"train": 40, "validation": 2, "test": 6}
    out = real_text.make_splits(sizes, seed=0, min_chars=100)
    again = real_text.make_splits(sizes, seed=7, min_chars=100)
    assert out == again  # the split and order of a file depend on its path only
    assert _files(out["test"]).isdisjoint(_files(out["train"]))
    assert _files(out["validation"]).isdisjoint(_files(out["train"]) | _files(out["test"]))
    for split, rows in out.items():
        for row in rows:  # a module's source and its docstrings land in the same split
            kind, key = row["source"].split(":", 1)
            assert real_text.split_of(key) == split
            assert kind in real_text.KINDS and len(row["text"]) >= 100
    texts = {split: {r["text"] for r in rows} for split, rows in out.items()}
    assert not texts["test"] & (texts["train"] | texts["validation"]), "one text in two splits"
    assert not any("alias" in r["source"] or r["source"] == "license:LICENSE" for rows in out.values() for r in rows)
    kinds = Counter(r["source"].split(":")[0] for r in out["train"])
    assert set(kinds) == {"stdlib", "docstrings", "license", "man"}, kinds
    assert not any("test_skip" in r["source"] or r["source"] == "man:man1/tool0.1.gz" for r in out["train"])
    with warnings.catch_warnings():  # a small split that does not reach every kind is not "missing" a kind
        warnings.simplefilter("error")
        real_text.make_splits({"train": 2}, seed=0, min_chars=100)
    # a larger train split starts with the same documents
    assert real_text.make_splits({"train": 20}, seed=0, min_chars=100)["train"] == out["train"][:20]


def test_missing_folders_leave_the_other_kinds_and_nothing_at_all_is_an_error(machine, monkeypatch):
    monkeypatch.setattr(real_text, "MAN_DIR", machine / "nowhere")
    with pytest.warns(UserWarning, match="no man documents"):
        out = real_text.make_splits({"train": 10}, seed=0, min_chars=100)
    assert len(out["train"]) == 10
    monkeypatch.setattr(real_text, "LICENSE_DIR", machine / "nowhere")
    monkeypatch.setattr(real_text, "stdlib_dir", lambda: machine / "nowhere")
    with pytest.raises(FileNotFoundError, match="real_text: no documents found"):
        real_text.make_splits({"train": 10}, seed=0, min_chars=100)


def test_real_text_is_used_only_where_named():
    assert "real_text" not in names() and len(names()) == 7
    assert "real_text" in names(all_types=True)
