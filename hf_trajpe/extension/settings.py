"""The settings rule of the remaps: the largest relative distance a setting gives a sequence, the nearest setting
that keeps every distance inside the trained length at a longer length, and the choice per method from a
validation read (docs/results/extension/remap_smollm2/README.md, "How each method's settings were chosen").

``scripts/remap_choose_settings.py`` applies it to a ``long_context.json``; :mod:`.candidates` builds
``hf-trajpe extend``'s candidates with it. Standard library only (the command line reads it while parsing).
"""

from __future__ import annotations

__all__ = ["REMAPS", "beyond_trained", "choose", "fit_to_length", "largest_distance", "method_of"]

#: the remap methods the rule knows (a candidate's ``encoding``)
REMAPS = ("self_extend", "rerope", "dca", "string")


def method_of(options: dict) -> str | None:
    """The remap method of a candidate's patch options, or ``None`` for anything else."""
    name = options.get("encoding")
    return name if name in REMAPS else None


def beyond_trained(entry: dict) -> float:
    """Perplexity of the tokens past the trained length (the windows from 1x on, pooled by their tokens)."""
    from ..evaluation.long_context import span_perplexity  # (torch: imported when a report is read)

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
