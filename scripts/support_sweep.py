"""The coverage sweep: patch every causal-LM and masked-LM model type of the installed transformers.

    HF_HUB_OFFLINE=1 python scripts/support_sweep.py            # all model types (3-6 min on 2 cores)
    HF_HUB_OFFLINE=1 python scripts/support_sweep.py llama opt  # a few

Writes docs/support.md (every model type, each encoding, each check, or why it was not checked) and
hf_trajpe/patching/families/supported.py (``SUPPORTED``: model type -> encodings that passed every check).
A model type is *green* when every encoding its structure allows passed every check.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


LIMIT_BYTES = 8 * 2**30
#: per model type; the slowest that shrinks (falcon_h1, a Mamba hybrid in plain torch) took 140 s on 2 cores
#: shared with other jobs, so 120 s cut it off, and with the layer-map cell more than 300 s on cores shared with
#: three other jobs; a config that does not shrink still stops here
LIMIT_SECONDS = 600


def _too_slow(signum, frame):
    raise TimeoutError(f"took more than {LIMIT_SECONDS} s")


def main(argv: list[str] | None = None) -> int:
    import warnings

    import torch
    import transformers

    from hf_trajpe.coverage import CHECKS, check_model_type, model_types

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("types", nargs="*", help="model types to check (default: all)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "support.md"))
    p.add_argument("--supported", default=os.path.join(ROOT, "hf_trajpe", "patching", "families", "supported.py"))
    p.add_argument("--json", default=os.path.join(ROOT, "docs", "results", "support.json"))
    args = p.parse_args(argv)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)

    todo = [(t, m) for t, m in model_types() if not args.types or m in args.types]
    rows, start = {}, time.time()
    # a model type whose default config does not shrink can ask for many GB or many minutes: cap both
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))
    signal.signal(signal.SIGALRM, _too_slow)
    for i, (task, model_type) in enumerate(todo):
        t0 = time.time()
        signal.alarm(LIMIT_SECONDS)
        try:
            cells, why = check_model_type(model_type, task)
        except (MemoryError, TimeoutError, RuntimeError) as exc:
            cells, why = [], f"not checked: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        finally:
            signal.alarm(0)
        rows[f"{task}:{model_type}"] = {
            "task": task, "model_type": model_type, "why": why,
            "cells": [{"encoding": c.encoding, "checks": c.checks, "error": c.error, "green": c.green} for c in cells],
        }
        print(f"[{i + 1}/{len(todo)}] {task} {model_type}: "
              f"{why or sum(c.green for c in cells)} / {len(cells)} ({time.time() - t0:.1f} s)", flush=True)
    elapsed = time.time() - start
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "seconds": elapsed,
                   "rows": rows}, fh, indent=1, default=str)
    if not args.types:  # only a full sweep rewrites the support table and SUPPORTED
        write_markdown(args.out, rows, elapsed, CHECKS)
        write_supported(args.supported, rows)
        write_readme_block(os.path.join(ROOT, "README.md"), rows)
    green = sum(1 for r in rows.values() if r["cells"] and all(c["green"] for c in r["cells"]))
    print(f"{green} of {len(rows)} model types green ({elapsed:.0f} s)")
    return 0


def _green(row) -> bool:
    return bool(row["cells"]) and all(c["green"] for c in row["cells"])


def write_readme_block(path: str, rows: dict) -> None:
    """The list of green model types between the support markers of the README."""
    start, end = "<!-- support:start -->", "<!-- support:end -->"
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if start not in text or end not in text:
        return
    green = sorted({r["model_type"] for r in rows.values() if _green(r)})
    block = (f"{start}\n**{len(green)} model types** (with their default configs; see docs/support.md): "
             + ", ".join(f"`{t}`" for t in green) + f".\n{end}")
    text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_supported(path: str, rows: dict) -> None:
    from hf_trajpe.coverage.checks import LAYER_MAP

    supported, layered = {}, set()
    for row in rows.values():
        ok = [c["encoding"] for c in row["cells"] if c["green"]]
        if LAYER_MAP in ok:
            layered.add(row["model_type"])
            ok.remove(LAYER_MAP)
        if not ok:
            continue
        encodings = [e for e in ok if not e.startswith("trajectory/")]
        if any(e.startswith("trajectory/") for e in ok):
            encodings.append("trajectory")
        supported[row["model_type"]] = tuple(dict.fromkeys(supported.get(row["model_type"], ()) + tuple(encodings)))
    lines = ['"""Written by scripts/support_sweep.py: model_type -> encodings that passed every check of the sweep',
             '(docs/support.md). Do not edit by hand: run the sweep."""', "",
             "SUPPORTED: dict[str, tuple[str, ...]] = {"]
    for t, e in sorted(supported.items()):
        line = f"    {t!r}: {tuple(e)!r},"
        if len(line) <= 120:
            lines.append(line)
        else:  # wrapped, so the file stays within the line length
            lines += [f"    {t!r}: ("] + [f"        {x!r}," for x in e] + ["    ),"]
    lines.append("}")
    lines += ["", "#: model types whose layer-map cell passed every check (layer selections: docs/patching.md)",
              "SUPPORTED_LAYERS: frozenset[str] = frozenset({"]
    lines += [f"    {t!r}," for t in sorted(layered)]
    lines.append("})")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def write_markdown(path: str, rows: dict, elapsed: float, checks) -> None:
    import torch
    import transformers

    green = [r for r in rows.values() if _green(r)]
    partial = [r for r in rows.values() if r["cells"] and not _green(r)]
    refused = [r for r in rows.values() if not r["cells"]]
    out = ["# Support by model type", "",
           "Generated by `HF_HUB_OFFLINE=1 python scripts/support_sweep.py` "
           f"(transformers {transformers.__version__}, torch {torch.__version__}, {platform.machine()}, "
           f"{elapsed / 60:.0f} min on 2 CPU cores). Each causal-LM (`clm`) and masked-LM (`mlm`) model type of "
           "the installed transformers is built from a tiny config (2 layers, 64 wide, float32, sdpa where the "
           "model has it, else eager), patched with every encoding its structure allows, and checked:", "",
           "- `stock`: `native` gives the stock logits exactly;",
           "- `strength 0`: trajectory at strength 0 gives its base's logits exactly;",
           "- `cache`: greedy generation with the KV cache equals generation without it (causal models);",
           "- `padding`: a left-padded row equals the sequence alone (to 1e-5);",
           "- `reload`: `save_pretrained` + `hf_trajpe.from_pretrained` give the same logits exactly;",
           "- `unpatch`: the stock logits come back exactly;",
           "- `layers` (the `layer map` cell, where the model's layers take layer selections: a rotary module shared "
           "by its attention layers): every layer through a layer selection with the model's own rotation (`native` "
           "on layer 0, trajectory at strength 0 on the others) gives the stock logits exactly; the cache, padding, "
           "reload and unpatch checks of that cell run on the map `{\"0\": \"none\", \"1:\": \"alibi\"}`.", "",
           f"**{len(green)} model types green** (every allowed encoding passed every check), "
           f"{len(partial)} partly green, {len(refused)} not patched (the reason is given). Each model type is "
           "checked with its default config, shrunk: a checkpoint whose config turns on other position machinery "
           "(DeBERTa-v3's `relative_attention`, a `dynamic` rotary type) is refused when patched, with the reason.",
           "",
           "## Green", "", "| task | model type | encodings |", "|---|---|---|"]
    for r in sorted(green, key=lambda r: (r["model_type"], r["task"])):
        out.append(f"| {r['task']} | `{r['model_type']}` | {', '.join(c['encoding'] for c in r['cells'])} |")
    from hf_trajpe.coverage.checks import LAYER_MAP

    layered = sorted({r["model_type"] for r in rows.values()
                      if any(c["encoding"] == LAYER_MAP and c["green"] for c in r["cells"])})
    out += ["", "## Layer selections and layer maps", "",
            f"**{len(layered)} model types** take layer selections (`hf_trajpe.patch(model, \"none\", layers=...)`, "
            "layer maps, per-layer encodings in the recipe's and the studies' YAML; docs/patching.md, \"Layer "
            "selections and layer maps\"), their `layer map` cell green: "
            + ", ".join(f"`{t}`" for t in layered) + ". Models whose own encoding is a learned table added to the "
            "input embeddings (GPT-2, BERT, OPT, ...) and the "
            "family overrides (GPT-J, BLOOM, MPT) are refused with the reason: no layer of theirs has an encoding "
            "of its own to swap."]
    out += ["", "## Partly green", "", "| task | model type | green | failed (check or error) |", "|---|---|---|---|"]
    for r in sorted(partial, key=lambda r: (r["model_type"], r["task"])):
        ok = ", ".join(c["encoding"] for c in r["cells"] if c["green"]) or "-"
        bad = "; ".join(
            f"{c['encoding']}: " + (c["error"] or ", ".join(k for k, v in c["checks"].items() if v is False))
            for c in r["cells"] if not c["green"])
        out.append(f"| {r['task']} | `{r['model_type']}` | {ok} | {bad.replace('|', '/')} |")
    out += ["", "## Not patched", "", "| task | model type | why |", "|---|---|---|"]
    for r in sorted(refused, key=lambda r: (r["model_type"], r["task"])):
        out.append(f"| {r['task']} | `{r['model_type']}` | {(r['why'] or '').replace('|', '/')} |")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
