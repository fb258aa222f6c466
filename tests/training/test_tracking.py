"""metrics.jsonl: a torn last record (a run killed while appending) never blocks --resume; any other damage
is named with the file and the line; the file is rewritten atomically."""

from __future__ import annotations

import json
import os
import sys

import pytest

from hf_trajpe.training.files import RunFileError
from hf_trajpe.training.tracking import JSONLTracker, read_metrics

RECORDS = [{"step": s, "train/loss": 3.0 - s / 10} for s in (1, 2, 3, 4)]


def write(path, records, tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_a_torn_last_record_is_dropped_with_a_warning_and_resume_goes_on(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    write(path, RECORDS, tail='{"step": 5, "train/lo')  # killed in the middle of an append
    with pytest.warns(RuntimeWarning, match=r"metrics.jsonl: line 5 is a torn record.*dropped"):
        assert read_metrics(tmp_path) == RECORDS

    inode = path.stat().st_ino
    synced = []
    real_fsync = os.fsync
    linux = sys.platform.startswith("linux")  # fsynced descriptors are named through /proc
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}") if linux else ""),
                                                 real_fsync(fd))[1])
    with pytest.warns(RuntimeWarning, match="torn record"):
        JSONLTracker(tmp_path, resume_step=3).start()  # what --resume from step 3 does
    assert path.read_text() == "".join(json.dumps(r) + "\n" for r in RECORDS[:3])
    assert path.stat().st_ino != inode, "rewritten into a new file and renamed over the old one (atomic)"
    assert any(p.startswith(str(tmp_path / ".metrics.jsonl.tmp-")) for p in synced) or not linux, "not fsynced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"], "no temporary file is left"


@pytest.mark.parametrize("damage,line", [
    ('{"step": 2, "train/lo\n', 2),  # a torn record followed by more: not the tail of an interrupted append
    ("[1, 2]\n", 2),
    ("\x00\x00\x00\n", 2),
])
def test_any_other_malformed_line_is_an_error_naming_file_and_line(tmp_path, damage, line):
    path = tmp_path / "metrics.jsonl"
    write(path, RECORDS[:1], tail=damage + "".join(json.dumps(r) + "\n" for r in RECORDS[1:]))
    with pytest.raises(RunFileError, match=rf"metrics.jsonl, line {line}: not a JSON"):
        read_metrics(path)
    before = path.read_bytes()
    with pytest.raises(RunFileError, match=rf"metrics.jsonl, line {line}"):
        JSONLTracker(tmp_path, resume_step=3).start()
    assert path.read_bytes() == before, "a file that cannot be read is left as it is"


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write(path, RECORDS[:3], tail=json.dumps(RECORDS[3]))
    assert read_metrics(path) == RECORDS
