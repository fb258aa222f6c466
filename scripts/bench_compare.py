"""Two runs of ``hf-trajpe bench all`` side by side, target by target: the ratio and its interval before and
after, and each verdict (a row missing from one run is marked so). Used to give a change's before and after from
one sitting: run the benchmark on the old code, then on the new, back to back on a quiet machine.

    python scripts/bench_compare.py BEFORE/bench.json AFTER/bench.json [--out compare.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _targets(path: Path) -> tuple[dict, dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"bench_compare: cannot read {path} ({err}); give the bench.json of `hf-trajpe bench all`"
                         ) from None
    if "targets" not in data or "meta" not in data:
        raise SystemExit(f"bench_compare: {path} has no targets: give the bench.json of `hf-trajpe bench all`")
    return data["meta"], {(t["what"], t["where"], t["variant"]): t for t in data["targets"]}


def _cell(t: dict | None) -> str:
    if t is None:
        return "not measured"
    interval = t.get("interval")
    spread = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""  # (memory: one measurement)
    return f"{t['measured']:.3f}{spread} {t['verdict']}"


def compare(before: Path, after: Path) -> str:
    (meta_b, rows_b), (meta_a, rows_a) = _targets(before), _targets(after)
    lines = [f"Before: {before} ({meta_b['date_utc']} UTC, transformers {meta_b['transformers']}, "
             f"{meta_b.get('wall_s', 0):.0f} s); after: {after} ({meta_a['date_utc']} UTC, transformers "
             f"{meta_a['transformers']}, {meta_a.get('wall_s', 0):.0f} s); CPU {meta_a['cpu']}.", "",
             "| target | where | variant | limit | before | after |", "|---|---|---|---:|---:|---:|"]
    for key in list(rows_b) + [k for k in rows_a if k not in rows_b]:
        b, a = rows_b.get(key), rows_a.get(key)
        limit = (a or b).get("limit")
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {'-' if limit is None else limit} | {_cell(b)} | "
                     f"{_cell(a)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, help="write the table here too (markdown)")
    args = parser.parse_args(argv)
    text = compare(args.before, args.after)
    if args.out is not None:
        args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
