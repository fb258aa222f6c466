"""Re-judge a published content study with the current statistics, from its JSON alone (its models need
not be on the machine): Student's t over seeds plus the sequence spread, Holm across the report's
comparisons, and the Benjamini-Hochberg false discovery rate beside it (hf_trajpe/study/suites/content/rejudge.py).

    python scripts/rejudge_content_study.py                          # docs/results/study -> rejudged.md/json
    python scripts/rejudge_content_study.py --study-dir outputs/study_quick --out outputs/rejudged
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from hf_trajpe.study.loading import load_study_config
from hf_trajpe.study.suites.content.rejudge import rejudge_markdown, rejudge_study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study-dir", default="docs/results/study",
                        help="folder with the study's study.json and report.json (default: %(default)s)")
    parser.add_argument("--out", default=None, help="where rejudged.md and rejudged.json go (default: --study-dir)")
    parser.add_argument("--config", default="configs/study/default.yaml",
                        help="the study's YAML, for its declared correction and analysis plan (default: %(default)s)")
    args = parser.parse_args(argv)
    study_dir = Path(args.study_dir)
    missing = [n for n in ("study.json", "report.json") if not (study_dir / n).is_file()]
    if missing:
        parser.error(f"{study_dir} has no {' or '.join(missing)}: give --study-dir the report_dir of a content "
                     "study (hf-trajpe study --config configs/study/default.yaml writes both)")
    out = Path(args.out or study_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = load_study_config(args.config)
    result = rejudge_study(study_dir, plan.correction, plan.to_dict()["analysis"])
    command = "python " + " ".join(shlex.quote(a) for a in ["scripts/rejudge_content_study.py", *sys.argv[1:]])
    (out / "rejudged.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "rejudged.md").write_text(rejudge_markdown(result, command))
    print(f"{result['family_size']} comparisons ({result['unseen']} counted without their values): "
          f"{out / 'rejudged.md'}, {out / 'rejudged.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
