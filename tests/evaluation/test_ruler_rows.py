"""The RULER rows file: a resume never writes two rows on one line nor loses a saved row, the header holds only
what defines a run (the same ``--dtype auto`` command resumes), a run refused before its first row does not
block the corrected rerun, and a line that is not a row is a one-line error naming the file and the line."""

from __future__ import annotations

import contextlib
import json

import pytest

from hf_trajpe.cli import main
from hf_trajpe.evaluation.ruler import runner
from hf_trajpe.evaluation.ruler.rows import RowsFile, run_header

from .test_ruler_run import _tiny_llama

DCA = 'dca={"encoding": "dca", "chunk_size": %d}'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ruler_rows") / "tiny"
    _tiny_llama(max_positions=256).save_pretrained(folder)
    return folder


def _argv(out, *extra, samples: int = 2) -> list[str]:
    return ["eval", "--long-context", "600", "--ruler", "--tasks", "niah_single_1", "--haystacks", "noise",
            "--samples", str(samples), "--tokenizer", "byte", "--bootstrap", "50", "--no-progress",
            "--out", str(out), *extra]


@pytest.fixture
def generated(monkeypatch) -> list[int]:
    """One entry per prompt generated (not taken from the rows file)."""
    calls: list[int] = []
    real = runner.generate_answer_counted
    monkeypatch.setattr(runner, "generate_answer_counted", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _header(path) -> dict:
    return json.loads(path.read_text().splitlines()[0])["header"]


# --- through the command -------------------------------------------------------------------------------------


def test_a_last_row_without_its_newline_gets_it_before_the_next_row_is_appended(tiny, tmp_path, generated):
    out, rows_file = tmp_path / "out", tmp_path / "out" / "ruler_rows.jsonl"
    assert main(_argv(out, "--model", f"stock={tiny}")) == 0
    rows_file.write_text(rows_file.read_text().removesuffix("\n"))  # a write cut just before the last newline
    generated.clear()
    assert main(_argv(out, "--model", f"stock={tiny}", samples=3)) == 0
    assert len(generated) == 1, "both saved rows taken; only the third sample generated"
    text = rows_file.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 1 + 3
    assert [json.loads(line)["index"] for line in text.splitlines()[1:]] == [0, 1, 2]
    generated.clear()
    assert main(_argv(out, "--model", f"stock={tiny}", samples=3)) == 0
    assert generated == [], "no saved row lost"


def test_dtype_auto_resumes_whatever_speed_up_it_measures(tiny, tmp_path, generated, monkeypatch):
    import hf_trajpe.precision as precision

    out = tmp_path / "out"
    for run, speedup in enumerate((1.21, 1.34)):  # below the threshold both times: float32, measured differently
        monkeypatch.setattr(precision, "bfloat16_speedup", lambda s=speedup: s)
        generated.clear()
        assert main(_argv(out, "--model", f"stock={tiny}", "--dtype", "auto")) == 0
        assert len(generated) == (2 if run == 0 else 0)
    assert _header(out / "ruler_rows.jsonl") == {"dtype": "float32", "seed": 0,
                                                 "methods": {"stock": {"model": str(tiny), "patch": None}}}
    assert json.loads((out / "ruler.json").read_text())["meta"]["precision"]["speedup"] == 1.34, \
        "the measurement is in the report"


def test_a_run_refused_before_its_first_row_leaves_no_rows_file(tiny, tmp_path, generated, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert main(_argv(out, "--model", f"dca={tiny}", "--patch", DCA % 1000)) == 2
    assert "chunk_size (dca) must not exceed the trained length 256" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    assert main(_argv(out, "--model", f"dca={tiny}", "--patch", DCA % 128)) == 0
    assert _header(out / "ruler_rows.jsonl")["methods"]["dca"]["patch"]["chunk_size"] == 128


def test_a_method_refused_before_its_first_row_takes_the_corrected_patch_on_rerun(tiny, tmp_path, generated, capsys):
    out = tmp_path / "out"
    models = ["--model", f"stock={tiny}", "--model", f"dca={tiny}"]
    assert main(_argv(out, *models, "--patch", DCA % 1000)) == 2  # stock's two rows saved, then dca refused
    capsys.readouterr()
    generated.clear()
    with pytest.warns(RuntimeWarning, match="no rows saved yet for method dca: .*1000.* -> .*128"):
        assert main(_argv(out, *models, "--patch", DCA % 128)) == 0
    assert len(generated) == 2, "stock's rows taken, dca's generated"
    assert _header(out / "ruler_rows.jsonl")["methods"]["dca"]["patch"]["chunk_size"] == 128
    # once dca has rows, its definition binds
    assert main(_argv(out, *models, "--patch", DCA % 64)) == 2
    assert "holds rows of another run (method dca" in capsys.readouterr().err


def test_a_line_that_is_not_a_row_names_the_file_and_the_line(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    rows_file = out / "ruler_rows.jsonl"
    header = {"precision": {"requested": "float32", "dtype": "float32", "reason": "as requested"}, "seed": 0,
              "methods": {"stock": {"model": str(tiny), "patch": None}}}  # as files of earlier versions hold it
    rows_file.write_text(json.dumps({"header": header}) + "\n{}\n")
    assert main(_argv(out, "--model", f"stock={tiny}")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{rows_file}, line 2: not a RULER row (no method, task, haystack" in err
    assert "remove that line (its prompt is generated again) or move the file away" in err


@pytest.mark.parametrize(("content", "message"), [
    (b"\x1f\x8b\x08\x00\xa3\xf1\n\xff\xfe\x00\n", "line 1: not UTF-8 text, so not a RULER rows file; give another"),
    (b"\x1f\x8b\x08\x00\xa3\xf1\xff\xfe\x00", "is not a RULER rows file (no header line); give another --out"),
])
def test_a_binary_rows_file_names_the_file_and_is_left_alone(tiny, tmp_path, capsys, content, message):
    out = tmp_path / "out"
    out.mkdir()
    rows_file = out / "ruler_rows.jsonl"
    rows_file.write_bytes(content)
    with pytest.warns(RuntimeWarning) if b"\n" not in content else contextlib.nullcontext():
        assert main(_argv(out, "--model", f"stock={tiny}")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(rows_file) in err and message in err
    assert rows_file.read_bytes() == content


# --- the file itself -----------------------------------------------------------------------------------------


def _row(index: int, method: str = "a") -> dict:
    return {"task": "vt", "haystack": None, "length": 64, "index": index, "prompt_sha1": f"sha{index}",
            "method": method, "score": 1.0}


HEADER = run_header("float32", 0, {"a": {"model": "m", "patch": None}})


def _write(path, *records, end: str = "\n") -> None:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + end)


def test_rows_written_back_to_back_are_split_and_a_cut_tail_dropped(tmp_path):
    path = tmp_path / "rows.jsonl"
    cut = json.dumps(_row(3))[:25]
    _write(path, {"header": HEADER}, json.dumps(_row(0)) + json.dumps(_row(1)), json.dumps(_row(2)) + cut, end="")
    with pytest.warns(RuntimeWarning) as caught:
        done = RowsFile(path, HEADER).read()
    messages = " | ".join(str(w.message) for w in caught)
    assert "line 2: 2 rows on one line" in messages and "line 3: a last line cut short" in messages
    assert sorted(r["index"] for r in done.values()) == [0, 1, 2]
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"header": HEADER}, *map(_row, range(3))]


def test_a_file_of_only_a_cut_header_is_replaced_by_the_first_row(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"header": HEADER})[:30])
    rows = RowsFile(path, HEADER)
    with pytest.warns(RuntimeWarning, match="line 1: a last line cut short"):
        assert rows.read() == {}
    rows.append(_row(0))
    assert path.read_text() == json.dumps({"header": HEADER}) + "\n" + json.dumps(_row(0)) + "\n"


def test_a_header_without_rows_is_replaced_and_one_with_rows_binds(tmp_path):
    path = tmp_path / "rows.jsonl"
    bf16 = run_header("bfloat16", 0, {"a": {"model": "m", "patch": None}})
    _write(path, {"header": bf16})
    with pytest.warns(RuntimeWarning, match="holds no rows yet; its header .* is replaced by this run's"):
        assert RowsFile(path, HEADER).read() == {}
    assert _header(path) == HEADER
    _write(path, {"header": bf16}, _row(0))
    with pytest.raises(ValueError, match=r"holds rows of another run \(dtype 'bfloat16' -> 'float32'\); give another "
                                         r"--out, or move the file away to start afresh; or read in the saved rows' "
                                         r"dtype \(--dtype bfloat16\)"):
        RowsFile(path, HEADER).read()


def test_a_header_of_earlier_versions_resumes_untouched(tmp_path):
    path = tmp_path / "rows.jsonl"
    old = {"precision": {"requested": "auto", "dtype": "float32", "speedup": 1.2, "reason": "measured"}, "seed": 0,
           "methods": HEADER["methods"]}
    _write(path, {"header": old}, _row(0), _row(1))
    before = path.read_bytes()
    assert len(RowsFile(path, HEADER).read()) == 2
    assert path.read_bytes() == before


@pytest.mark.parametrize(("line", "message"), [
    ("[1, 2]", "line 3: a JSON list, not a RULER row"),
    (json.dumps({"header": HEADER}), "line 3: a second header"),
    (json.dumps(_row(1, method="b")), "line 3: a row of method b, which the header does not define"),
    ("{not json", "line 3: not JSON"),
])
def test_a_damaged_line_is_refused_naming_the_line(tmp_path, line, message):
    path = tmp_path / "rows.jsonl"
    _write(path, {"header": HEADER}, _row(0), line, _row(2))
    before = path.read_bytes()
    with pytest.raises(ValueError, match="rows.jsonl, " + message.replace("[", r"\[").replace("]", r"\]")):
        RowsFile(path, HEADER).read()
    assert path.read_bytes() == before
