"""Choose each remap method's setting from a validation read, by the rule written in
docs/results/extension/remap_smollm2/README.md: the lowest perplexity of the tokens past the trained length
(the geometric mean of the windows beyond 1x, weighted by their token counts), per method; then the setting
at a longer length that keeps every mapped distance inside the trained length.

    python scripts/remap_choose_settings.py docs/results/extension/remap_smollm2/validation_16k/long_context.json \
        --lengths 16384 32768

Prints, per length, the `--patch` options of the chosen settings as JSON (name -> options), and the methods
whose setting cannot keep every distance under the limit at that length, with the reason. The rule itself is
``hf_trajpe.extension.settings``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# the rule lives in the library (hf-trajpe extend builds its candidates with it); this script applies it to a report
from hf_trajpe.extension.settings import REMAPS as METHODS  # noqa: F401
from hf_trajpe.extension.settings import beyond_trained, choose, fit_to_length, largest_distance, method_of  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path, help="long_context.json of the validation read")
    p.add_argument("--lengths", type=int, nargs="+", default=[16384, 32768])
    args = p.parse_args(argv)
    report = json.loads(args.report.read_text())
    trained = report["trained_length"]
    best = choose(report)
    for method, (name, _options, ppl) in sorted(best.items()):
        others = ", ".join(f"{n} {beyond_trained(report['models'][n]):.2f}" for n, o in report["patches"].items()
                           if method_of(o) == method)
        print(f"# {method}: {name} ({ppl:.2f}; candidates: {others})", file=sys.stderr)
    for length in args.lengths:
        chosen, cannot = {}, {}
        for method, (_, options, _) in sorted(best.items()):
            if length == report["length"]:  # the length the candidates were read at: the choice as it is
                chosen[method] = options
                continue
            try:
                chosen[method] = fit_to_length(options, length, trained)
            except ValueError as exc:
                cannot[method] = str(exc)
        print(json.dumps({"length": length, "patches": chosen, "cannot": cannot}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
