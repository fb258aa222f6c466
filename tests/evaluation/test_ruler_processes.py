"""RULER spread over processes: `accelerate launch` with two CPU processes writes the rows file and the report
one process writes, each row once, continuing what an interrupted run with another number of processes left
(its part files folded in first); one process continues a spread run; the part files' own refusals."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from hf_trajpe.cli import main
from hf_trajpe.evaluation.ruler import runner
from hf_trajpe.evaluation.ruler.processes import Processes, launched
from hf_trajpe.evaluation.ruler.rows import RowsFile, part_path, run_header

from ..training.runs import ROOT, command, env
from .test_ruler_run import _tiny_llama

CPU_2PROC = ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"
ROWS = "ruler_rows.jsonl"
YARN = 'yarn={"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2}}'


def _argv(tiny, out) -> list[str]:
    """Two methods of four prompts each: eight rows, in the order one process makes them."""
    return ["eval", "--long-context", "1200", "--ruler", "--tasks", "niah_single_1", "vt", "--haystacks", "noise",
            "--samples", "2", "--tokenizer", "byte", "--bootstrap", "50", "--no-progress", "--model", f"stock={tiny}",
            "--model", f"yarn={tiny}", "--patch", YARN, "--out", str(out)]


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """The run in one process: the model, and the folder whose rows and report every spread run must give."""
    root = tmp_path_factory.mktemp("ruler_processes")
    _tiny_llama(max_positions=256).save_pretrained(root / "tiny")
    assert main(_argv(root / "tiny", root / "one")) == 0
    return root / "tiny", root / "one"


@pytest.fixture
def generated(monkeypatch) -> list[int]:
    """One entry per prompt generated in this process (not taken from the rows file)."""
    calls: list[int] = []
    real = runner.generate_answer_counted
    monkeypatch.setattr(runner, "generate_answer_counted", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _untimed(line: str) -> dict:
    record = json.loads(line)
    return {k: v for k, v in record.items() if k not in ("wall_seconds", "cpu_seconds")}


def _same_rows(got: list[str], want: list[str]) -> None:
    assert [_untimed(line) for line in got] == [_untimed(line) for line in want], \
        "every row once, in the order one process writes them, equal but for the timings"


def test_two_processes_share_the_prompts_and_write_what_one_process_writes(one, tmp_path):
    tiny, ref = one
    lines = (ref / ROWS).read_text().splitlines()  # the header, then eight rows
    out = tmp_path / "two"
    out.mkdir()
    # left by a run of three processes: two rows in the rows file, one in process 2's part, then a row cut short
    (out / ROWS).write_text("\n".join(lines[:3]) + "\n")
    (out / f"{ROWS}.part-2").write_text(lines[0] + "\n" + lines[3] + "\n" + lines[4][:30])
    cmd = [command("accelerate"), "launch", "--config_file", str(CPU_2PROC), "-m", "hf_trajpe", *_argv(tiny, out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(env(), ACCELERATE_USE_CPU="true"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    # five rows missing: stock's last prompt and yarn's four; each process takes every other one of each method
    shares = sorted(re.findall(r"RULER: process (\d) of (\d) \(cpu\) makes (\d+) of the (\d+) prompts", proc.stderr))
    assert shares == [("0", "2", "3", "5"), ("1", "2", "2", "5")], proc.stderr[-3000:]
    assert f"{ROWS}.part-2, line 3: a last line cut short" in proc.stderr
    assert proc.stdout.count("# RULER") == 1 and proc.stdout.count("\nwrote ") == 1, "reported once"

    got = (out / ROWS).read_text().splitlines()
    assert got[:4] == lines[:4], "the saved rows kept as they were, the part's row after them"
    _same_rows(got, lines)
    assert sorted(p.name for p in out.iterdir()) == ["ruler.json", "ruler.md", ROWS, "ruler_vs_length.png"]
    report = {name: json.loads((folder / "ruler.json").read_text()) for name, folder in (("two", out), ("one", ref))}
    assert report["two"]["summary"] == report["one"]["summary"] and report["two"]["meta"] == report["one"]["meta"]
    md = {name: re.sub(r"Generation CPU \d+ s", "", (folder / "ruler.md").read_text())
          for name, folder in (("two", out), ("one", ref))}
    assert md["two"] == md["one"]


def test_one_process_continues_what_two_processes_left(one, tmp_path, generated, capsys):
    tiny, ref = one
    lines = (ref / ROWS).read_text().splitlines()
    out = tmp_path / "resumed"
    out.mkdir()
    (out / ROWS).write_text("\n".join(lines[:2]) + "\n")
    (out / f"{ROWS}.part-0").write_text("\n".join([lines[0], lines[2], lines[4]]) + "\n")
    # a fold cut short after the rows file was replaced: part 1's first row is in both
    (out / f"{ROWS}.part-1").write_text("\n".join([lines[0], lines[1], lines[3]]) + "\n")
    assert main(_argv(tiny, out)) == 0
    assert "RULER: 4 rows taken from" in capsys.readouterr().err
    assert len(generated) == 4, "only the four rows neither file held are generated"
    got = (out / ROWS).read_text().splitlines()
    assert got[:5] == lines[:5]
    _same_rows(got, lines)
    assert not list(out.glob("*.part-*"))


# --- the part files ------------------------------------------------------------------------------------------


def _row(index: int, method: str = "a") -> dict:
    return {"task": "vt", "haystack": None, "length": 64, "index": index, "prompt_sha1": f"sha{index}",
            "method": method, "score": 1.0}


HEADER = run_header("float32", 0, {"a": {"model": "m", "patch": None}})


def _write(path, *records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_parts_are_folded_in_run_order_and_removed(tmp_path):
    path = tmp_path / "rows.jsonl"
    _write(path, {"header": HEADER}, _row(0))
    _write(part_path(path, 0), {"header": HEADER}, _row(3), _row(1))
    _write(part_path(path, 1), {"header": HEADER}, _row(0), _row(2), _row(9))
    (tmp_path / "rows.jsonl.part-old").write_text("not a part")
    order = [runner.prompt_key("a", _row(i)) for i in range(4)]
    rows = RowsFile(path, HEADER)
    assert [r["index"] for r in rows.fold(order).values()] == [0, 1, 2, 3, 9], "the rows not in order last"
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"header": HEADER},
                                                                           *map(_row, (0, 1, 2, 3, 9))]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl", "rows.jsonl.part-old"]
    rows.append(_row(4))
    assert len(path.read_text().splitlines()) == 1 + 6


def test_parts_without_rows_leave_no_rows_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    part_path(path, 0).write_text("")
    _write(part_path(path, 1), {"header": HEADER})
    rows = RowsFile(path, HEADER)
    assert rows.fold() == {} and list(tmp_path.iterdir()) == []
    rows.append(_row(0))
    assert path.read_text() == json.dumps({"header": HEADER}) + "\n" + json.dumps(_row(0)) + "\n"


def test_a_part_of_another_run_is_refused_and_nothing_is_moved(tmp_path):
    path = tmp_path / "rows.jsonl"
    _write(path, {"header": HEADER}, _row(0))
    _write(part_path(path, 1), {"header": run_header("bfloat16", 0, HEADER["methods"])}, _row(1))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r"rows.jsonl.part-1 holds rows of another run \(dtype 'bfloat16' -> "):
        RowsFile(path, HEADER).fold()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_two_definitions_of_a_method_in_the_file_and_a_part_are_refused(tmp_path):
    path = tmp_path / "rows.jsonl"
    b1, b2 = {"model": "m", "patch": None}, {"model": "m", "patch": {"encoding": "dca"}}
    _write(path, {"header": {**HEADER, "methods": {**HEADER["methods"], "b": b1}}}, _row(0, "b"))
    _write(part_path(path, 0), {"header": {**HEADER, "methods": {**HEADER["methods"], "b": b2}}}, _row(1, "b"))
    with pytest.raises(ValueError, match=r"rows.jsonl.part-0 holds rows of method b made by .*dca.*, .*rows.jsonl "
                                         r"rows of it made by .*; move one of the two files away"):
        RowsFile(path, HEADER).fold()
    assert part_path(path, 0).exists()


# --- the launch ----------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_launch(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    launched.cache_clear()
    yield monkeypatch
    launched.cache_clear()


def test_without_a_launcher_there_is_one_process(fresh_launch):
    procs = launched()
    assert procs == Processes() and procs.main and procs.share([1, 2, 3]) == [1, 2, 3]
    assert procs.broadcast("x") == "x" and procs.gather("x") == ["x"] and procs.device() == "cpu"
    assert Processes(rank=1, world=2).share(list(range(5))) == [1, 3]


def test_a_cpu_launch_that_started_one_process_says_so(fresh_launch):
    fresh_launch.setenv("MASTER_ADDR", "127.0.0.1")  # what accelerate launch --cpu --num_processes 2 sets
    fresh_launch.setenv("ACCELERATE_USE_CPU", "True")
    with pytest.warns(RuntimeWarning, match="accelerate launch started one process: with --cpu it starts one"):
        assert launched().world == 1


def test_a_world_size_that_is_not_a_number_is_refused(fresh_launch):
    fresh_launch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not a whole number; start the processes with"):
        launched()
