"""Run the long-context evaluation (:mod:`.long_context`) over named models and patches; write JSON and Markdown.

Each distinct model source is loaded once; every name that reads it is patched with its options, evaluated
and unpatched in turn (unpatching restores the stock model bit for bit), so comparing five extensions of one
model loads it once.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .long_context import LONG_KINDS, WINDOW_EDGES, long_documents, passkey_retrieval, perplexity_by_window, token_nll
from .metrics import get_metric

__all__ = ["evaluate_long_context", "plot_ppl_by_window", "write_long_context_report", "trained_length_of"]


def trained_length_of(model) -> int:
    """The length a model was trained to: its config's ``original_max_position_embeddings`` (an extended
    model), else ``max_position_embeddings``."""
    params = getattr(model.config, "rope_parameters", None) or {}
    length = params.get("original_max_position_embeddings") if isinstance(params, dict) else None
    length = length or getattr(model.config, "max_position_embeddings", None)
    if not length:
        raise ValueError(f"{type(model).__name__}: cannot tell the trained length from its config; give it")
    return int(length)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def evaluate_long_context(models: dict[str, str], patches: dict[str, dict] | None = None, tokenizer: str | None = None,
                          length: int = 12288, trained_length: int | None = None,
                          kinds: Sequence[str] = LONG_KINDS, documents: int = 2, split: str = "test",
                          passkey_lengths: Sequence[int] = (), passkey_depths: Sequence[float] = (0.1, 0.5, 0.9),
                          passkey_trials: int = 1, edges: Sequence[float] = WINDOW_EDGES, n_resamples: int = 2000,
                          progress: bool = True, dtype: str = "float32", prefill_chunk: int | None = None) -> dict:
    """``models``: name -> model source (folder, ``.gguf`` file or ``package:``); ``patches``: name -> options
    of ``hf_trajpe.patch`` (``{"encoding": "rope", "rope_parameters": {...}}``), none for the model as loaded.
    ``dtype``: ``float32``, ``bfloat16`` or ``auto`` (:func:`hf_trajpe.precision.resolve_dtype`: measured on this
    machine); every model and patch of the run reads in the same type, and the result says which and why.
    ``prefill_chunk``: read each document that many tokens at a time through the KV cache (bounded memory at
    long lengths; :func:`~.long_context.token_nll`). Returns the report as a dict (what
    :func:`write_long_context_report` writes)."""
    import torch
    from tqdm.auto import tqdm

    from ..data import load_tokenizer
    from ..loading import load_model
    from ..patching import patch
    from ..patching.schemes.remap.units import resolve_boundary_ids
    from ..precision import resolve_dtype

    patches = patches or {}
    torch_dtype, precision = resolve_dtype(dtype)
    unknown = sorted(set(patches) - set(models))
    if unknown:
        raise ValueError(f"patch options for {', '.join(unknown)}, which no --model names")
    by_source: dict[str, list[str]] = {}
    for name, source in models.items():
        by_source.setdefault(source, []).append(name)
    result: dict = {"length": length, "edges": list(edges), "kinds": list(kinds), "models": {}, "patches": patches,
                    "precision": precision, "prefill_chunk": prefill_chunk, "split": split}
    tok = load_tokenizer(tokenizer or next(iter(models.values())))
    docs = None
    started = time.process_time()
    for source, names in by_source.items():
        _log(f"long-context: loading {source}")
        model = load_model(source).eval().to(torch_dtype)
        trained = trained_length or trained_length_of(model)
        result["trained_length"] = trained
        if docs is None:
            docs = {k: long_documents(tok, k, length, documents, split) for k in kinds}
            empty = [k for k, d in docs.items() if not d]
            if len(empty) == len(kinds):
                raise FileNotFoundError(f"no {split} document of {', '.join(kinds)} has {length} tokens on this "
                                        "machine; give a shorter length or other kinds")
            for k in empty:
                _log(f"long-context: no {split} document of {k} with {length} tokens here; {k} is left out")
            docs = {k: d for k, d in docs.items() if d}
            result["documents"] = {k: [d["source"] for d in v] for k, v in docs.items()}
        for name in names:
            options = resolve_boundary_ids(dict(patches.get(name) or {}), tok)
            handle = patch(model, options.pop("encoding", "native"), **options) if name in patches else None
            model_started = time.process_time()
            try:
                nlls: dict[str, list[torch.Tensor]] = {}
                bar = tqdm(total=sum(len(d) for d in docs.values()), desc=f"{name}: {length} tokens", unit="doc",
                           disable=not progress, file=sys.stderr)
                for kind, kind_docs in docs.items():
                    nlls[kind] = []
                    for doc in kind_docs:
                        nlls[kind].append(token_nll(model, doc["ids"], prefill_chunk=prefill_chunk))
                        bar.update(1)
                bar.close()
                entry = {"windows": {}, "passkey": []}
                pooled = [n for v in nlls.values() for n in v]
                for kind, values in (("all", pooled), *nlls.items()):
                    entry["windows"][kind] = [vars(w) | {"label": w.label}
                                              for w in perplexity_by_window(values, trained, edges, n_resamples)]
                if passkey_lengths:
                    found = passkey_retrieval(model, tok, passkey_lengths, passkey_depths, passkey_trials,
                                              progress=_log if progress else None)
                    entry["passkey"] = [vars(r) for r in found]
                entry["cpu_seconds"] = time.process_time() - model_started  # its reads (and passkeys), not loading
                result["models"][name] = entry
            finally:
                if handle is not None:
                    handle.unpatch()
    result["cpu_seconds"] = time.process_time() - started
    return result


def _ppl(w: dict) -> str:
    shown = get_metric("perplexity_by_window").format
    return f"{shown(w['ppl'])} [{shown(w['ci'][0])}, {shown(w['ci'][1])}]"


def plot_ppl_by_window(result: dict, path: str | Path, title: str | None = None) -> None:
    """Perplexity of every kind pooled against position (each window drawn flat over its span, log scale), one
    line per model; the trained length marked. Several reads of one model set: merge their ``models`` first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trained = result["trained_length"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, (name, model) in enumerate(result["models"].items()):
        xs, ys = [], []
        for w in model["windows"]["all"]:
            xs += [w["low"] * trained, w["high"] * trained]
            ys += [w["ppl"], w["ppl"]]
        ax.plot(xs, ys, label=name, color=f"C{k % 10}", linestyle="-" if k < 10 else "--")
    ax.axvline(trained, color="grey", linewidth=0.8, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel(f"position (tokens; dotted: the trained length, {trained:,})")
    ax.set_ylabel("perplexity of the window")
    ax.set_title(title or f"{result['length']:,} tokens per document", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_long_context_report(result: dict, out: str | Path) -> dict[str, Path]:
    """``long_context.json``, ``long_context.md`` and ``ppl_by_window.png`` (:func:`plot_ppl_by_window`) in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(result["models"])
    first = result["models"][names[0]]["windows"]["all"]
    n_docs = sum(len(v) for v in result["documents"].values())
    few = (f"; with {n_docs} documents the bootstrap gives the range of their values, not an interval"
           if n_docs < 5 else "")
    lines = ["# Long context: perplexity by position, passkey retrieval\n",
             f"{result['length']} tokens per document; trained length {result['trained_length']}; windows in "
             "multiples of it; perplexity of the tokens in each window, 95% bootstrap over documents "
             + ("of the validation files " if result.get("split") == "validation" else "")
             + f"({', '.join(f'{k}: {len(v)}' for k, v in result['documents'].items())}{few}). CPU "
             f"{result['cpu_seconds']:.0f} s"
             + (f"; read in {result['precision']['dtype']} ({result['precision']['reason']})" if "precision" in result
                else "") + ".\n"]
    for kind in ["all", *result["documents"]]:
        lines += [f"\n## {'every kind' if kind == 'all' else kind}\n",
                  "| model | " + " | ".join(w["label"] for w in first) + " |",
                  "|---|" + "---:|" * len(first)]
        for name in names:
            windows = result["models"][name]["windows"][kind]
            lines.append(f"| {name} | " + " | ".join(_ppl(w) for w in windows) + " |")
    passkeys = {n: result["models"][n]["passkey"] for n in names if result["models"][n]["passkey"]}
    if passkeys:
        cells = [(p["length"], p["depth"]) for p in next(iter(passkeys.values()))]
        lines += ["\n## Passkey retrieval (right / trials, greedy)\n",
                  "| model | " + " | ".join(f"{n} tok, depth {d:g}" for n, d in cells) + " |",
                  "|---|" + "---:|" * len(cells)]
        for name, rows in passkeys.items():
            lines.append(f"| {name} | " + " | ".join(f"{r['right']}/{r['trials']}" for r in rows) + " |")
    cpu = {n: m["cpu_seconds"] for n, m in result["models"].items() if "cpu_seconds" in m}
    if cpu:
        lines += ["\n## CPU seconds of each model's reads (loading left out)\n", "| model | CPU s |", "|---|---:|"]
        lines += [f"| {n} | {s:.0f} |" for n, s in cpu.items()]
    if result.get("patches"):
        lines += ["\n## Patches\n"]
        lines += [f"- `{n}`: `{json.dumps(o, sort_keys=True)}`" for n, o in result["patches"].items()]
    paths = {"json": out / "long_context.json", "md": out / "long_context.md", "png": out / "ppl_by_window.png"}
    paths["json"].write_text(json.dumps(result, indent=2, default=str) + "\n")
    paths["md"].write_text("\n".join(lines) + "\n")
    plot_ppl_by_window(result, paths["png"])
    return paths
