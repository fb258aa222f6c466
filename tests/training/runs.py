"""Run recipes/finetune.py in a subprocess (one process, or two CPU processes with accelerate launch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "finetune.py"
TINY = ROOT / "configs" / "experiments" / "tiny_native.yaml"
CPU_1PROC = ROOT / "configs" / "accelerate" / "cpu.yaml"
#: small and fast: 30 documents per type (~180 blocks of 64 byte tokens), batch 4, an eval every 4 steps
FAST = ["data.train=30", "data.validation=4", "data.eval_blocks=2", "train.batch_size=4", "train.log_every=1",
        "logging.progress=false"]


def env() -> dict:
    """The environment of a launched run: offline, one thread, and the test interpreter's own scripts folder
    first on PATH (a virtual environment that was not activated still finds its own commands)."""
    e = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    return e


def command(name: str) -> str:
    """The console script ``name`` (``accelerate``, ``torchrun``) of the environment running the tests: the
    one beside its interpreter, else the one on PATH; fails the test naming what to install."""
    import shutil

    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"the {name} command is not installed in this environment (make install)"
    return found


def recipe_cmd(config: Path, out: Path, *overrides: str, resume: bool = False) -> list[str]:
    cmd = [sys.executable, str(RECIPE), "--config", str(config), f"output_dir={out}", *FAST, *overrides]
    return cmd + (["--resume"] if resume else [])


def launcher_cmd(config: Path, out: Path, *overrides: str, accelerate_config: Path = CPU_1PROC) -> list[str]:
    """The documented command: ``accelerate launch --config_file ... recipes/finetune.py --config ...``."""
    return [command("accelerate"), "launch", "--config_file", str(accelerate_config), str(RECIPE),
            "--config", str(config), f"output_dir={out}", *FAST, *overrides]


def run_recipe(config: Path, out: Path, *overrides: str, resume: bool = False, check: bool = True,
               timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(recipe_cmd(config, out, *overrides, resume=resume), cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"recipe failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def losses(out: Path) -> dict[int, float]:
    from hf_trajpe.training.tracking import read_metrics

    return {r["step"]: r["train/loss"] for r in read_metrics(out) if "train/loss" in r}


def rank_summary(out: Path, rank: int = 0) -> dict:
    return json.loads((out / "ranks" / f"rank_{rank}.json").read_text())


def descendants(pid: int) -> list[int]:
    """Processes below ``pid`` (Linux: read from /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
