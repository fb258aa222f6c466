"""The default test suite in fresh environments across the tested window: ``make test-compat``.

Rows (each a new virtual environment under .compat/, made by scripts/install.sh from nothing but torch):

- ``oldest``: the oldest tested transformers, accelerate and PEFT together (hf_trajpe/compat.py ``TESTED``);
- ``newest``: the pinned environment of constraints.txt (what ``make install`` gives);
- ``index``: the newest transformers, accelerate and PEFT on the package index, where any is newer than the
  window (pyproject.toml sets lower bounds only): how the next break is seen the day it appears.

It prints one table (versions, passed / failed / errors / skipped, wall and CPU seconds) and, with ``--out``,
writes it with the date and machine (docs/compat.md). ``--freeze`` rewrites constraints.txt from the
``newest`` environment once its suite passed. Exit status 1 if any row of the window failed (an ``index``
row failing is reported, not an error: it is outside the window).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hf_trajpe.compat import TESTED, version_tuple  # noqa: E402

PACKAGES = ("transformers", "accelerate", "peft")
TEST_COMMAND = ["-m", "pytest", "-m", "not slow and not gguf and not gpu", "-q", "-p", "no:cacheprovider"]
CONSTRAINTS_HEADER = """\
# The environment the test suite last passed in (newest end of the tested window; make test-compat).
# make install applies it as pip constraints (-c): the versions a fresh set-up gets. torch is left out on
# purpose: an installed torch (CUDA or CPU) is kept, and with none scripts/install.sh installs torch==2.13.0.
# Regenerate after a passing run in a fresh environment: python scripts/test_compat.py --freeze
"""


def newest_on_index(package: str) -> str | None:
    """The newest release of ``package`` that pip would install here, or ``None`` if the index cannot say."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True,
                             text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(rf"^{re.escape(package)} \(([^)]+)\)", out, re.MULTILINE)
    return match.group(1) if match else None


def rows(skip_index: bool) -> list[tuple[str, dict[str, str], bool]]:
    """``(label, pins, constrained)`` of each environment to test."""
    out = [("oldest", {p: TESTED[p][0] for p in PACKAGES}, False), ("newest", {}, True)]
    if not skip_index:
        newer = {}
        for package in PACKAGES:
            latest = newest_on_index(package)
            if latest and version_tuple(latest) > version_tuple(TESTED[package][1]):
                newer[package] = latest
        if newer:
            out.append(("index", newer, True))
    return out


def build(label: str, pins: dict[str, str], constrained: bool, base_python: str) -> Path:
    venv = ROOT / ".compat" / label
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    env = dict(os.environ, PYTHON=str(python), BASE_PYTHON=base_python,
               CONSTRAINTS="constraints.txt" if constrained else "",
               EXTRA="" if label == "index" else " ".join(f"{p}=={v}" for p, v in pins.items()))
    subprocess.run(["bash", "scripts/install.sh"], cwd=ROOT, env=env, check=True, stdout=sys.stderr)
    if label == "index":  # past constraints.txt's pins, which install.sh applied: installed over them
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *(f"{p}=={v}" for p, v in pins.items())],
                       cwd=ROOT, check=True, stdout=sys.stderr)
    return python


def installed(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            f"{('torch', *PACKAGES)!r}}}))")
    return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout)


def run_suite(python: Path, label: str) -> dict:
    report = ROOT / ".compat" / f"{label}.xml"
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PATH"] = str(python.parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([str(python), *TEST_COMMAND, f"--junitxml={report}"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    (ROOT / ".compat" / f"{label}.log").write_text(proc.stdout + proc.stderr)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if report.exists():
        suites = ET.parse(report).getroot()
        for suite in suites.iter("testsuite"):
            for key in counts:
                counts[key] += int(suite.get(key, 0))
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {"passed": passed, "failed": counts["failures"], "errors": counts["errors"], "skipped": counts["skipped"],
            "wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "returncode": proc.returncode}


def table(results: list[dict]) -> str:
    lines = ["| environment | transformers | accelerate | peft | torch | passed | failed | errors | skipped | wall "
             "| CPU |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        v = r["versions"]
        lines.append(f"| {r['label']} | {v['transformers']} | {v['accelerate']} | {v['peft']} | {v['torch']} | "
                     f"{r['passed']} | {r['failed']} | {r['errors']} | {r['skipped']} | {r['wall_s']:.0f} s | "
                     f"{r['cpu_s']:.0f} s |")
    return "\n".join(lines)


def freeze(python: Path) -> None:
    out = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                         text=True, check=True).stdout
    keep = [line for line in out.splitlines()
            if line and not re.match(r"(torch|nvidia|triton)\b", line, re.IGNORECASE) and "==" in line]
    (ROOT / "constraints.txt").write_text(CONSTRAINTS_HEADER + "\n".join(keep) + "\n")
    print(f"test-compat: wrote constraints.txt ({len(keep)} pins) from the newest environment")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the table with its date and machine to this Markdown file")
    parser.add_argument("--only", choices=("oldest", "newest", "index"), action="append",
                        help="test only these rows (repeatable)")
    parser.add_argument("--no-index", action="store_true", help="do not ask the package index for newer releases")
    parser.add_argument("--freeze", action="store_true",
                        help="rewrite constraints.txt from the newest environment if its suite passed")
    parser.add_argument("--base-python", default=os.environ.get("BASE_PYTHON", "python3"),
                        help="the interpreter the environments are made from (default: python3)")
    args = parser.parse_args()
    if args.out is not None and not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: the folder {args.out.parent} does not exist")

    results = []
    for label, pins, constrained in rows(args.no_index):
        if args.only and label not in args.only:
            continue
        print(f"test-compat: {label}: building a fresh environment", file=sys.stderr, flush=True)
        python = build(label, pins, constrained, args.base_python)
        versions = installed(python)
        print(f"test-compat: {label}: {versions}; running the default suite", file=sys.stderr, flush=True)
        result = {"label": label, "versions": versions, **run_suite(python, label)}
        results.append(result)
        print(f"test-compat: {label}: {result['passed']} passed, {result['failed']} failed, {result['errors']} errors "
              f"({result['wall_s']:.0f} s wall, {result['cpu_s']:.0f} s CPU; log .compat/{label}.log)",
              file=sys.stderr, flush=True)
        if args.freeze and label == "newest" and result["returncode"] == 0:
            freeze(python)
    text = table(results)
    print(text)
    if args.out is not None:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
        args.out.write_text(
            f"# Compatibility: the default test suite across the tested window\n\n"
            f"Measured {datetime.date.today().isoformat()} with `make test-compat` (`python scripts/test_compat.py`), "
            f"Python {platform.python_version()}, {cpu}, {os.cpu_count()} cores. Each row is a fresh virtual "
            "environment; `oldest` and `newest` are the ends of the tested window (pyproject.toml requires the oldest, "
            "constraints.txt pins the newest), `index` the "
            "newest releases on the package index where newer than the window.\n\n" + text + "\n")
    window_failed = any(r["returncode"] != 0 for r in results if r["label"] != "index")
    return 1 if window_failed else 0


if __name__ == "__main__":
    sys.exit(main())
