"""A JSON-lines tracker for accelerate (beside TensorBoard): one record per logged step in
``output_dir/metrics.jsonl``, easy to read back in tests and scripts. On resume, records after the
resumed step (written by the interrupted run after its last checkpoint) are dropped, so the file holds
one curve, as an uninterrupted run would have written it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from accelerate.tracking import GeneralTracker, on_main_process

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
            self.path.write_text("")
            return
        kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= self.resume_step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

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
    """Records of a ``metrics.jsonl`` (a file, or a run's output folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
