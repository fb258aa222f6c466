"""One study at a time in an output_dir (hf_trajpe/study/lock.py), checked with separate processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hf_trajpe.cli import main
from hf_trajpe.study.lock import LOCK_NAME, StudyLock

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "configs" / "study" / "tasks.yaml")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}

HOLDER = """
import sys, time
from hf_trajpe.study.lock import StudyLock
lock = StudyLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock")


def _holder(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True, env=ENV,
                            cwd=ROOT)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _study(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hf_trajpe", "study", "--quick", "--config", TASKS,
                           f"output_dir={out}"], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)


def test_a_second_study_in_the_same_output_dir_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "study"
    holder = _holder(out)
    try:
        second = _study(out)
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"hf-trajpe study: error: {out} is in use by another study (pid {holder.pid} on " in second.stderr
    assert "Traceback" not in second.stderr
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME], "the refused study wrote nothing"


def test_the_lock_of_a_killed_study_is_taken_over_with_a_note(tmp_path):
    out = tmp_path / "study"
    holder = _holder(out)
    holder.send_signal(signal.SIGKILL)  # no clean-up: its lock file stays, naming it
    holder.wait()
    assert f"{holder.pid} " in (out / LOCK_NAME).read_text()
    notes = []
    with StudyLock(out, notes.append):
        assert (out / LOCK_NAME).read_text().startswith(f"{os.getpid()} ")
        with pytest.raises(FileExistsError, match=f"pid {os.getpid()} on "):  # held: refused, even here
            StudyLock(out, notes.append).acquire()
    assert len(notes) == 1 and f"taking over the lock of pid {holder.pid} on " in notes[0]
    with StudyLock(out, notes.append):  # released cleanly: nothing to take over, no note
        pass
    assert len(notes) == 1


def test_an_output_dir_that_is_a_file_is_named_as_the_key(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("a file")
    assert main(["study", "--quick", "--config", TASKS, f"output_dir={target}"]) == 2
    err = capsys.readouterr().err
    assert f"output_dir '{target}' is a file, not a folder" in err and "Errno" not in err
    assert target.read_text() == "a file"
