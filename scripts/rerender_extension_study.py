"""Write a published extension study's reports again from its study.json and real/long_context.json, with the
current statistics and the plan (correction, analysis) its YAML declares; no model is read again
(hf_trajpe/study/suites/extension/rerender.py).

    python scripts/rerender_extension_study.py            # docs/results/extension/study
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hf_trajpe.study.suites.extension.rerender import rerender_extension_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report-dir", default="docs/results/extension/study",
                        help="folder with the study's study.json (default: %(default)s)")
    parser.add_argument("--config", default="configs/study/extension.yaml",
                        help="the study's YAML, for its declared correction and analysis plan "
                             "(default: %(default)s)")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    if not (Path(args.report_dir) / "study.json").is_file():
        parser.error(f"{args.report_dir} has no study.json: give --report-dir the report_dir of an extension study "
                     "(hf-trajpe study --config configs/study/extension.yaml writes it)")
    changed = rerender_extension_report(args.report_dir, args.config)
    print(f"{args.report_dir}: study.md and study.json written again; {len(changed)} verdict(s) changed")
    for line in changed:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
