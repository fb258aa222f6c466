"""The folder of an extension run: its record (``extension.json``, with the run's definition and the rule written
before any read), each read saved as it finishes (``reads/``), so that the same command continues an interrupted
run, and a folder of another run is refused with the difference named.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ..paths import atomic_write_text

__all__ = ["RECORD", "READS", "RunFolder", "difference"]

RECORD = "extension.json"
READS = "reads"


def _short(value: object, width: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[:width - 3] + "..."


def difference(there: dict, here: dict) -> list[str]:
    """``key: value there, value here`` for each key of a run's definition that differs (nested keys dotted)."""
    out = []
    for key in [*here, *(k for k in there if k not in here)]:
        a, b = there.get(key), here.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{d}" for d in difference(a, b)]
        else:
            out.append(f"{key}: {_short(a)} there, {_short(b)} here")
    return out


class RunFolder:
    """``path`` holding one run: :meth:`begin` binds it to a definition (or refuses), :meth:`read` and :meth:`save`
    keep each read, :meth:`write` the record."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @property
    def record_path(self) -> Path:
        return self.path / RECORD

    def previous(self) -> dict | None:
        """The record of an earlier run in the folder, or ``None``; a ``ValueError`` for a folder that holds other
        things, or a record that is not one."""
        if not self.path.exists():
            return None
        if not self.path.is_dir():
            raise ValueError(f"--out {self.path} is a file; give a folder for the extension's outputs")
        if not self.record_path.is_file():
            if any(self.path.iterdir()):
                raise ValueError(f"--out {self.path} holds other files and no {RECORD}: give a new or empty folder "
                                 "(or the folder of the run to continue)")
            return None
        try:
            record = json.loads(self.record_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{self.record_path} cannot be read ({err}); move the folder away or give another "
                             "--out") from None
        if not isinstance(record, dict) or not isinstance(record.get("run"), dict):
            raise ValueError(f"{self.record_path} is not the record of an extension run; give another --out")
        return record

    def begin(self, definition: dict, record: dict) -> dict | None:
        """Bind the folder to ``definition``: a new folder gets ``record`` (the definition, the rule and the
        candidates, before any read); a folder of the same run is continued (its record is returned); another run's
        is refused naming what differs."""
        previous = self.previous()
        if previous is not None:
            diff = difference(previous["run"], definition)
            if diff:
                raise ValueError(f"{self.path} holds another extension run ({'; '.join(diff[:4])}"
                                 f"{'; ...' if len(diff) > 4 else ''}): give another --out, or the same options to "
                                 "continue that run")
            return previous
        self.write(record)
        return None

    def write(self, record: dict) -> None:
        atomic_write_text(self.record_path, json.dumps(record, indent=2, default=str) + "\n")

    def _read_path(self, stage: str, name: str, index: int) -> Path:
        return self.path / READS / stage / name / f"{index}.json"

    def read(self, stage: str, name: str, index: int) -> dict | None:
        """A saved read (``{"source", "nll", "cpu_seconds"}``, ``nll`` a float64 tensor), or ``None``."""
        path = self._read_path(stage, name, index)
        if not path.is_file():
            return None
        try:
            saved = json.loads(path.read_text())
            saved["nll"] = torch.tensor(saved["nll"], dtype=torch.float64)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a damaged file: read again
        return saved

    def save(self, stage: str, name: str, index: int, source: str, nll: torch.Tensor, cpu_seconds: float) -> None:
        atomic_write_text(self._read_path(stage, name, index),
                      json.dumps({"source": source, "cpu_seconds": cpu_seconds, "nll": nll.tolist()}))
