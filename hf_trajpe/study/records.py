"""The study's own records in its ``output_dir``: ``study.json`` (what decides the trained models, so a
resumed study reuses only what still fits), ``training_sessions.jsonl`` (one line per session that trained),
and the versions that made the numbers."""

from __future__ import annotations

import json
import multiprocessing
import platform
from pathlib import Path

__all__ = ["append_session", "check_output_dir", "cpus", "package_versions", "read_sessions"]

SESSIONS = "training_sessions.jsonl"


def cpus() -> int:
    try:
        import os

        return len(os.sched_getaffinity(0))
    except AttributeError:
        return multiprocessing.cpu_count()


def package_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "platform": platform.platform(), "cpus": str(cpus())}
    for pkg in ("hf_trajpe", "torch", "transformers", "accelerate", "datasets", "evaluate", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def check_output_dir(cfg, out: Path) -> None:
    """Refuse an ``output_dir`` that holds models of other model/data/training settings; mark it as ours."""
    marker = out / "study.json"
    if marker.exists():
        saved = json.loads(marker.read_text())
        if saved.get("fingerprint") != cfg.fingerprint():
            if cfg.covered_by(saved.get("config") or {}):
                return  # a part of the study that marked this folder: its marker (the whole) stays
            raise FileExistsError(
                f"{out} holds models of a study with different model/data/training settings; "
                "set output_dir to a new folder (or delete this one) to train from scratch")
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"fingerprint": cfg.fingerprint(), "config": cfg.to_dict()}, indent=2) + "\n")


def append_session(out: Path, record: dict) -> None:
    with open(out / SESSIONS, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def read_sessions(out: Path) -> list[dict]:
    path = out / SESSIONS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
