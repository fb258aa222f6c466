"""Wall-clock time of every ``hf-trajpe ... --help`` (median of N fresh subprocesses), as a Markdown table.

    python scripts/cli_help_time.py                # median of 5 runs per command
    python scripts/cli_help_time.py --runs 9 --module   # run `python -m hf_trajpe` instead of the script

The commands are read from the parser itself (every sub-command, every sub-sub-command, and every choice
of a positional argument such as ``bench encoding``), so new commands are timed without editing this
file. The first row is the bare interpreter (``python -c pass``) for reference: on a shared machine,
read the other rows against it. For where the time goes, run ``python -X importtime -m hf_trajpe
COMMAND --help 2> imports.txt`` and sort by the cumulative column.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _commands() -> list[list[str]]:
    """Every command path of the parser: [], [study], [bench], [bench, encoding], [data, build], ..."""
    from hf_trajpe.cli import build_parser

    out: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        out.append(path)
        for action in parser._actions:  # argparse has no public API for walking sub-parsers
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.option_strings and action.choices and path:
                out.extend([*path, str(choice)] for choice in action.choices)

    walk(build_parser(), [])
    return out


def _launcher(module: bool) -> list[str]:
    script = Path(sys.executable).with_name("hf-trajpe")
    if not module and script.exists():
        return [str(script)]
    if not module and shutil.which("hf-trajpe"):
        return [shutil.which("hf-trajpe")]
    return [sys.executable, "-m", "hf_trajpe"]


def _median_seconds(cmd: list[str], runs: int, env: dict) -> tuple[float, int]:
    times, rc = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - t0)
        rc = rc or proc.returncode
    return statistics.median(times), rc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="subprocess runs per command (default: %(default)s)")
    p.add_argument("--module", action="store_true", help="time `python -m hf_trajpe` instead of the hf-trajpe script")
    args = p.parse_args()
    if args.runs < 1:
        p.error(f"--runs must be at least 1, got {args.runs}")
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    launcher = _launcher(args.module)
    rows = [("python -c pass (interpreter only)", *_median_seconds([sys.executable, "-c", "pass"], args.runs, env))]
    for path in _commands():
        label = " ".join(["hf-trajpe", *path, "--help"])
        rows.append((label, *_median_seconds([*launcher, *path, "--help"], args.runs, env)))
    print(f"launcher: {' '.join(launcher)}; median of {args.runs} runs; {os.cpu_count()} CPUs; "
          f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    width = max(len(r[0]) for r in rows) + 2
    print(f"| {'command':<{width}} | seconds | exit |")
    print(f"|{'-' * (width + 2)}|--------:|-----:|")
    for label, seconds, rc in rows:
        print(f"| {'`' + label + '`':<{width}} | {seconds:7.3f} | {rc:4d} |")
    return 1 if any(rc for _, _, rc in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
