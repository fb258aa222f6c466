"""Choose each remap method's setting from a validation read, by the rule written in
docs/results/extension/remap_smollm2/README.md: the lowest perplexity of the tokens past the trained length
(the geometric mean of the windows beyond 1x, weighted by their token counts), per method; then the setting
at a longer length that keeps every mapped distance inside the trained length.

    python scripts/remap_choose_settings.py docs/results/extension/remap_smollm2/validation_16k/long_context.json \
        --lengths 16384 32768

Prints, per length, the `--patch` options of the chosen settings as JSON (name -> options), and the methods
whose setting cannot keep every distance under the limit at that length, with the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hf_trajpe.evaluation.long_context import span_perplexity

#: candidate name prefix -> the method it belongs to
METHODS = ("self_extend", "rerope", "dca", "string")


def method_of(options: dict) -> str | None:
    name = options.get("encoding")
    return name if name in METHODS else None


def beyond_trained(entry: dict) -> float:
    """Perplexity of the tokens past the trained length (the windows from 1x on, pooled by their tokens)."""
    return span_perplexity(entry["windows"]["all"], 1.0)


def largest_distance(options: dict, length: int, trained: int) -> float:
    """The largest relative distance a setting gives a sequence of ``length`` tokens (in unscaled positions;
    with ``rope_parameters`` the limit is the scaled one, checked by the caller)."""
    n = length - 1
    name = options["encoding"]
    if name == "self_extend":
        g, w = options.get("group_size", 8), options.get("window", 1024)
        return max(w - 1, n // g + w - w // g)
    if name == "rerope":
        w, k = options.get("window", 512), options.get("leak")
        return w if k is None else w + (n - w) / k
    if name == "dca":
        return options.get("chunk_size") or 3 * trained // 4
    if name == "string":
        s = options.get("shift")
        extended = trained * (options.get("rope_parameters") or {}).get("factor", 1)
        s = int(0.33 * extended) if s is None else s
        w = options.get("local_window") or min(128, s // 2)
        # distances below the shift keep their value: the largest is the shift less one or the mapped longest
        return n if s == 0 or n < s else max(s - 1, n - s + w)
    raise ValueError(f"unknown method {name}")


def fit_to_length(options: dict, length: int, trained: int) -> dict:
    """``options`` at ``length``: unchanged where every distance stays below the limit, else the nearest setting
    that keeps them there (Self-Extend: a larger group; STRING: the shift that brings the longest distance in)."""
    limit = trained * (options.get("rope_parameters") or {}).get("factor", 1)
    options = dict(options)
    if largest_distance(options, length, trained) < limit:
        return options
    if options["encoding"] == "self_extend":
        while largest_distance(options, length, trained) >= limit:
            options["group_size"] = options.get("group_size", 8) * 2
        return options
    if options["encoding"] == "string":
        # a constant shift keeps distances below it and brings the others down by shift - W: both parts stay
        # under the limit only while length - 1 - limit + W < shift <= limit, i.e. length < 2 x limit - W + 1
        w = options.get("local_window") or 128
        if length - 1 - limit + w >= limit:
            raise ValueError(f"STRING cannot keep the distances of {length} tokens under {limit}: its shift keeps "
                             f"those below it, so it reaches at most {2 * limit - w} tokens; scale the frequencies "
                             "too (rope_parameters)")
        options.update(shift=limit, local_window=w)
        return options
    raise ValueError(f"{options}: distances reach {largest_distance(options, length, trained)} at {length} tokens, "
                     f"past {limit}; no rule to fit it")


def choose(report: dict) -> dict[str, tuple[str, dict, float]]:
    """method -> (candidate name, its options, its perplexity past the trained length), the lowest per method."""
    best: dict[str, tuple[str, dict, float]] = {}
    for name, entry in report["models"].items():
        options = report["patches"].get(name) or {}
        method = method_of(options)
        if method is None:
            continue
        ppl = beyond_trained(entry)
        if method not in best or ppl < best[method][2]:
            best[method] = (name, options, ppl)
    return best


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
