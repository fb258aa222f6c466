"""A JSON-lines tracker for accelerate (beside TensorBoard): one record per logged step in
``output_dir/metrics.jsonl``, easy to read back in tests and scripts. On resume, records after the
resumed step (written by the interrupted run after its last checkpoint) are dropped, so the file holds
one curve, as an uninterrupted run would have written it; the file is rewritten atomically.

A run killed while appending can leave a torn last record (no final newline, not valid JSON):
:func:`read_metrics` drops it with a warning naming the file. Any other line that is not a JSON object
raises :class:`~hf_trajpe.training.files.RunFileError` naming the file and the line.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from accelerate.tracking import GeneralTracker, on_main_process

from .files import RunFileError, atomic_write_text

__all__ = ["JSONLTracker", "read_metrics"]

METRICS = "metrics.jsonl"


class JSONLTracker(GeneralTracker):
    name = "jsonl"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, output_dir: str | os.PathLike, resume_step: int | None = None) -> None:
        super().__init__()
        self.path = Path(output_dir) / METRICS
        self.resume_step = resume_step

    @on_main_process
    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.resume_step is None:
            atomic_write_text(self.path, "")
            return
        kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= self.resume_step]
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    @property
    def tracker(self):
        return self.path

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        pass  # the resolved config is written as config.yaml beside the metrics

    @on_main_process
    def log(self, values: dict, step: int | None = None, **kwargs) -> None:
        record = {"step": step, **{k: (float(v) if hasattr(v, "__float__") else v) for k, v in values.items()}}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """Records of a ``metrics.jsonl`` (a file, or a run's output folder). A torn last record (the file
    does not end with a newline and its last line is not JSON) is dropped with a ``RuntimeWarning``; any
    other malformed line raises :class:`RunFileError` naming the file and the line."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            if number == len(lines):  # the last line has no newline after it: a write cut short
                warnings.warn(f"{path}: line {number} is a torn record (a write cut short: {line[:60]!r}...); "
                              "dropped", RuntimeWarning, stacklevel=2)
                break
            raise RunFileError(f"{path}, line {number}: not a JSON record ({err}); fix or remove that line") from None
        if not isinstance(record, dict):
            raise RunFileError(f"{path}, line {number}: not a JSON object: {line[:60]!r}")
        records.append(record)
    return records
