"""A study's training workers stop when the study process is killed (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hf_trajpe.study import workers

PARENT = textwrap.dedent("""
    import multiprocessing, os, sys, time
    from concurrent.futures import ProcessPoolExecutor
    sys.path.insert(0, sys.argv[3])  # the module alone (no torch to import in either process); spawn passes the path on
    from workers import stop_with_parent

    def task(path):
        with open(path, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)

    if __name__ == "__main__":
        init = stop_with_parent if sys.argv[2] == "on" else None
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=init,
                                   initargs=(os.getpid(),) if init else ())
        pool.submit(task, sys.argv[1])
        time.sleep(120)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its new parent counts as gone
        return f.read().split(")")[-1].split()[0] != "Z"


def _worker_after_parent_killed(tmp_path, mode: str) -> bool:
    script, pid_file = tmp_path / "parent.py", tmp_path / f"worker_{mode}.pid"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file), mode, str(Path(workers.__file__).parent)])
    try:
        for _ in range(300):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        worker = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        for _ in range(30):  # SIGTERM arrives at once; 3 s for a loaded machine
            if not _alive(worker):
                return False
            time.sleep(0.1)
        os.kill(worker, signal.SIGKILL)
        return True
    finally:
        parent.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_stops_when_the_study_process_is_killed(tmp_path):
    assert _worker_after_parent_killed(tmp_path, "off")  # without it the orphan keeps training
    assert not _worker_after_parent_killed(tmp_path, "on")
