"""Re-judge a published task study with the current statistics, from its tasks.json alone (its models need not
be on the machine), and write its tasks.json and tasks.md again (hf_trajpe/study/suites/tasks/rejudge.py). The
plan (correction, analysis) is the study YAML's; everything else is the JSON's.

    python scripts/rejudge_task_study.py                                     # docs/results/tasks
    python scripts/rejudge_task_study.py --report-dir docs/results/tasks/cope_scale
    python scripts/rejudge_task_study.py --report-dir docs/results/tasks_pilot --legacy
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from hf_trajpe.study.suites.tasks.rejudge import rejudge_legacy_report, rejudge_task_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report-dir", default="docs/results/tasks",
                        help="folder with the study's tasks.json (default: %(default)s)")
    parser.add_argument("--config", default="configs/study/tasks.yaml",
                        help="the study's YAML, for its declared correction and analysis plan "
                             "(default: %(default)s)")
    parser.add_argument("--legacy", action="store_true",
                        help="a report of the older format (docs/results/tasks_pilot): only the results whose seeds "
                             "all agree are recomputed in tasks.json, and tasks.md gets a note listing what changed")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    if not (Path(args.report_dir) / "tasks.json").is_file():
        parser.error(f"{args.report_dir} has no tasks.json: give --report-dir the report_dir of a task study "
                     "(hf-trajpe study --config configs/study/tasks.yaml writes it)")
    command = "python " + " ".join(shlex.quote(a) for a in ["scripts/rejudge_task_study.py",
                                                             *(argv if argv is not None else sys.argv[1:])])
    if args.legacy:
        changed = rejudge_legacy_report(args.report_dir, command)
    else:
        changed = rejudge_task_report(args.report_dir, args.config, command)
    print(f"{args.report_dir}: tasks.json and tasks.md written again; {len(changed)} verdict(s) changed")
    for line in changed:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
