"""What an extension run writes besides its record: the model (``model/``, with its model card), ``extension.md``,
the chart, and the screen the command ends with.

The model is a plain transformers checkpoint where transformers can express the choice (stock, or a frequency
scaling: ``rope_parameters`` in ``config.json``), else a save that ``hf_trajpe.from_pretrained`` loads (a remap,
trajectory positions): plain transformers would load the stock model from it.
"""

from __future__ import annotations

import json
from pathlib import Path

from .candidates import STOCK, Candidate

__all__ = ["markdown", "model_card", "plot", "save_model", "screen", "write_outputs"]

MODEL_DIR = "model"
CHART = "ppl_by_window.png"


def save_model(model, tokenizer, chosen: Candidate, path: str | Path) -> dict:
    """Save ``model`` (unpatched, in its own dtype) read as ``chosen`` into ``path``; returns ``{"form", "load"}``:
    ``transformers`` (``AutoModelForCausalLM.from_pretrained`` gives the chosen model) or ``hf_trajpe``
    (``hf_trajpe.from_pretrained``)."""
    from ..patching import patch
    from ..patching.rope_scaling import extend_config

    path = Path(path)
    if chosen.options is None:
        model.save_pretrained(path)
        form = "transformers"
    else:
        encoding, options = chosen.patch_options()
        handle = patch(model, encoding, **options)
        scaling = handle.plan.rope_scaling
        if chosen.kind == "scaling" and scaling is not None:
            handle.unpatch()  # a plain checkpoint: the stock model with the extension in its config
            restore = extend_config(model.config, scaling)
            try:
                model.save_pretrained(path)
            finally:
                restore()
            form = "transformers"
        else:
            try:
                model.save_pretrained(path)  # the weights as they are, plus the patch files
            finally:
                handle.unpatch()
            form = "hf_trajpe"
    try:
        tokenizer.save_pretrained(path)
        tokenizer_saved = True
    except Exception:  # a tokenizer without files of its own (none is needed to load the model)
        tokenizer_saved = False
    load = ("from transformers import AutoModelForCausalLM\n"
            f"model = AutoModelForCausalLM.from_pretrained({str(path)!r})" if form == "transformers" else
            f"import hf_trajpe\nmodel = hf_trajpe.from_pretrained({str(path)!r})")
    return {"path": str(path), "form": form, "load": load, "tokenizer_saved": tokenizer_saved}


def _settings(options: dict | None) -> str:
    return "the model as it is" if options is None else f"`{json.dumps(options, sort_keys=True)}`"


def _chosen_settings(chosen: dict) -> str:
    return _settings(None if chosen["encoding"] is None else {"encoding": chosen["encoding"], **chosen["options"]})


def _cell(w: dict, interval: bool) -> str:
    return f"{w['ppl']:.2f} [{w['ci'][0]:.2f}, {w['ci'][1]:.2f}]" if interval else f"{w['ppl']:.2f}"


def _kind_title(kind: str) -> str:
    from .texts import KIND_NAMES

    return "every kind" if kind == "all" else f"{kind}: {KIND_NAMES.get(kind, kind)}"


def _test_tables(record: dict, chosen: str) -> list[str]:
    methods = record["test"]["methods"]
    docs = record["test"]["documents"]
    lines = []
    for kind in ["all", *docs]:
        n = sum(len(v) for v in docs.values()) if kind == "all" else len(docs[kind])
        first = next(iter(methods.values()))["windows"][kind]
        lines += [f"\n### {_kind_title(kind)} ({n} document{'s' if n != 1 else ''})\n",
                  "| method | " + " | ".join(w["label"] for w in first) + " |", "|---|" + "---:|" * len(first)]
        for name, m in methods.items():
            label = f"**{name}** (chosen)" if name == chosen else name
            lines.append(f"| {label} | " + " | ".join(_cell(w, n >= 2) for w in m["windows"][kind]) + " |")
    return lines


def _candidate_table(record: dict) -> list[str]:
    chosen = record["chosen"]["name"]
    lines = ["| candidate | settings | ppl inside (vs stock) | ppl past | passes the inside test | CPU s |",
             "|---|---|---:|---:|---|---:|"]
    for c in record["candidates"]:
        name = f"**{c['name']}** (chosen)" if c["name"] == chosen else c["name"]
        v = c.get("validation")
        if v is None:
            lines.append(f"| {name} | {_settings(c['options'])} | refused: {c.get('refused')} | | | |")
            continue
        lines.append(f"| {name} | {_settings(c['options'])} | {v['ppl_inside']:.3f} "
                     f"({v['inside_vs_stock_percent']:+.2f}%) | {v['ppl_past']:.3f} | "
                     f"{'yes' if v['eligible'] else 'no'} | {v['cpu_seconds']:.0f} |")
    return lines


def _needle_lines(record: dict) -> list[str]:
    needles = record.get("needles")
    if not needles:
        return []
    lines = [f"\n## Needle prompts (RULER {needles['task']}, {needles['haystack']} haystack: prompts of "
             f"{needles['prompt_tokens']:,} tokens and up to {needles['max_new_tokens']} generated, greedy)\n",
             "| method | found | CPU s |", "|---|---:|---:|"]
    lines += [f"| {n} | {m['found']:g} / {m['prompts']} | {m['cpu_seconds']:.0f} |"
              for n, m in needles["methods"].items()]
    return lines


def _finetune_lines(record: dict) -> list[str]:
    f = record.get("finetune")
    if not f:
        return []
    text = f["text"] if isinstance(f["text"], str) else "your text (" + ", ".join(f["text"]) + ")"
    held = f.get("held_out")
    curve = (f"; perplexity of the held-out blocks of that text {held['first']['perplexity']:.3f} at step "
             f"{held['first']['step']}, {held['last']['perplexity']:.3f} at step {held['last']['step']}"
             if held else "")
    return [f"\n## Fine-tune: {f['name']}\n",
            _sentence(f"{f['why']}: {f['steps']} steps of PoSE (windows whose position ids skip up to "
                      f"{record['target_length']:,}) on {text}, {_wall(f)}{curve}. It reads the test "
                      f"documents above as `{f['name']}`; the saved model is `{f['model']}` "
                      "(`hf_trajpe.from_pretrained`), the recipe's command `" + f["command"] + "`")]


def _wall(f: dict) -> str:
    seconds = f.get("seconds_last_call", f.get("seconds"))
    return "trained by an earlier call" if not seconds else f"{seconds:.0f} s wall"


def _documents_note(record: dict) -> str:
    docs = record["test"]["documents"]
    n = sum(len(v) for v in docs.values())
    note = "perplexity of the tokens in each window of position (multiples of the trained length)"
    if n < 2:
        return note + "; one document: no interval"
    note += "; brackets: 95% bootstrap over documents"
    if n < 5:
        note += f" (with {n} documents they give the range of their values, not an interval)"
    few = [k for k, v in docs.items() if len(v) < 2]
    return note + (f"; {', '.join(few)}: one document, no interval" if few else "")


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ".\n"


def _lengths(record: dict) -> str:
    """The trained and target lengths, and the config's trained length where the run extended from another."""
    t, n, own = record["trained_length"], record["target_length"], record.get("config_trained_length")
    given = f" (given; the model's config says {own:,})" if own and own != t else ""
    return f"trained length {t:,}{given}, target {n:,} ({record['factor']:g}x)"


def _notes(record: dict) -> list[str]:
    return [f"Note: {note}\n" for note in record.get("notes", [])]


def markdown(record: dict) -> str:
    """``extension.md``: what was chosen, how, on what evidence, at what cost."""
    r, chosen, c, m = record, record["chosen"], record["costs"], record["machine"]
    lines = [f"# {r['run']['model']['source']} read to {r['target_length']:,} tokens: {chosen['name']}\n",
             f"{_sentence(_lengths(r))[:-2]}. Read in {r['precision']['dtype']} ({r['precision']['reason']}).\n",
             *_notes(r),
             f"**Chosen**: `{chosen['name']}`, {_chosen_settings(chosen)}: {chosen['why']}.\n",
             "## The rule (written into extension.json before any read)\n", _sentence(r["rule"]["text"]),
             f"## Validation ({len(r['validation']['documents'])} document(s): "
             f"{', '.join(r['validation']['documents'])})\n", *_candidate_table(r),
             "\n## Test documents (other files than the validation ones)\n", _sentence(_documents_note(r)),
             *_test_tables(r, chosen["name"]), *_needle_lines(r), *_finetune_lines(r),
             "\n## Costs\n",
             f"CPU seconds of the reads: validation {c['validation_cpu_seconds']:.0f}, test "
             f"{c['test_cpu_seconds']:.0f}, needle prompts {c['needles_cpu_seconds']:.0f}; total "
             f"{c['reads_cpu_seconds']:.0f} (reads taken from an earlier call count with their own cost). The last "
             f"call: {c['wall_seconds_this_call']:.0f} s wall.\n",
             "## Machine and versions\n",
             f"{m.get('cpu')}, {m.get('cpu_count')} cores, torch threads {m.get('torch_threads')}, bfloat16 units: "
             f"{m.get('cpu_bfloat16')}; " + ", ".join(f"{k} {v}" for k, v in r["versions"].items()) + ".\n"]
    if "model" in r:
        lines += ["## The model\n", f"`{r['model']['path']}` ({r['model']['form']} checkpoint):\n", "```python",
                  r["model"]["load"], "```"]
    return "\n".join(lines) + "\n"


def model_card(record: dict) -> str:
    """The saved model's ``README.md``: method, settings, the evidence, how to load it."""
    r, chosen = record, record["chosen"]
    past = {c["name"]: c["validation"] for c in r["candidates"] if c.get("validation")}
    if chosen["encoding"] is None:
        how = ("The model as it was: no candidate read the tokens past the trained length better on the validation "
               "text, so nothing is changed.")
    elif r["model"]["form"] == "transformers":
        how = "A plain transformers checkpoint: the extension is in `config.json`; hf_trajpe is not needed to load it."
    else:
        how = ("A hf_trajpe save: `config.json` is the stock model's and `hf_trajpe_config.json` holds the method, "
               "which `hf_trajpe.from_pretrained` applies (plain transformers would load the stock model).")
    lines = ["---", "library_name: transformers", "tags:", "- hf_trajpe", "- context-extension", "---", "",
             f"# {r['run']['model']['source']}, read to {r['target_length']:,} tokens ({chosen['name']})", "",
             f"Chosen by `hf-trajpe extend` on {r['machine'].get('date_utc')} UTC; {_lengths(r)}. {how}", "",
             *_notes(r), "## Method", "", f"`{chosen['name']}`: {chosen['why']}.", "",
             f"Settings: {_chosen_settings(chosen)}", "", "## The evidence", "",
             f"The rule, declared before any read: {r['rule']['text']}.", "",
             "Validation perplexity past the trained length: "
             + ", ".join(f"{n} {v['ppl_past']:.3f}" for n, v in past.items())
             + f" ({len(r['validation']['documents'])} document(s)). On the test documents "
             f"({_documents_note(r)}):", *_test_tables(r, chosen["name"]), *_needle_lines(r),
             "", "## How to load", "", "```python", r["model"]["load"], "```", "",
             "The full record (every candidate, costs, versions, machine): `../extension.json`, `../extension.md`."]
    return "\n".join(lines) + "\n"


def plot(record: dict, path: str | Path) -> str | None:
    """Perplexity by window per kind, one line per method (log scale, the trained length dotted); ``None`` when
    written, else why not."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no chart"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = record["trained_length"]
    kinds = ["all", *record["test"]["documents"]]
    fig, axes = plt.subplots(1, len(kinds), figsize=(4 * len(kinds), 3.4), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        for k, (name, m) in enumerate(record["test"]["methods"].items()):
            xs, ys = [], []
            for w in m["windows"][kind]:
                xs += [w["low"] * t, w["high"] * t]
                ys += [w["ppl"], w["ppl"]]
            chosen = name == record["chosen"]["name"]
            ax.plot(xs, ys, label=name + (" (chosen)" if chosen else ""), color=f"C{k}",
                    linewidth=2 if chosen else 1)
        ax.axvline(t, color="grey", linewidth=0.8, linestyle=":")
        ax.set_yscale("log")
        ax.set_title(_kind_title(kind), fontsize=9)
        ax.set_xlabel("position (tokens)", fontsize=8)
    axes[0][0].set_ylabel("perplexity of the window", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.9, wspace=0.25)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return None


def write_outputs(model, tokenizer, record: dict, chosen: Candidate, out: str | Path) -> dict[str, Path]:
    """``model/`` (with ``README.md``), ``extension.md`` and the chart; adds ``model`` and ``files`` to ``record``
    (the caller writes ``extension.json``)."""
    out = Path(out)
    record["model"] = save_model(model, tokenizer, chosen, out / MODEL_DIR)
    paths = {"model": out / MODEL_DIR, "json": out / "extension.json", "md": out / "extension.md"}
    why_not = plot(record, out / CHART)
    if why_not is None:
        paths["chart"] = out / CHART
    record["files"] = {k: str(v) for k, v in paths.items()} | ({"chart_note": why_not} if why_not else {})
    (out / MODEL_DIR / "README.md").write_text(model_card(record))
    paths["md"].write_text(markdown(record))
    return paths


def screen(record: dict) -> str:
    """The few lines the command ends with: the choice, one table per kind of text, where the files are."""
    r, chosen = record, record["chosen"]
    t = r["trained_length"]
    v = {c["name"]: c.get("validation") for c in r["candidates"]}
    lines = [f"hf-trajpe extend: {r['run']['model']['source']}, {_lengths(r)}, read in {r['precision']['dtype']} "
             f"({r['precision']['reason']})", *(f"note: {note}" for note in r.get("notes", [])),
             f"chosen: {chosen['name']} ({chosen['why']})"]
    if v.get(chosen["name"]) and v.get(STOCK):
        inside = (f"; inside, {chosen['name']} {v[chosen['name']]['inside_vs_stock_percent']:+.2f}% against stock"
                  if chosen["name"] != STOCK else "")
        lines.append(f"  validation perplexity past {t:,}: "
                     + ", ".join(f"{n} {x['ppl_past']:.3f}" for n, x in v.items() if x) + inside)
    methods = r["test"]["methods"]
    first = next(iter(methods.values()))["windows"]["all"]
    lines += ["", "| text | method | " + " | ".join(w["label"] for w in first) + " |",
              "|---|---|" + "---:|" * len(first)]
    docs = r["test"]["documents"]
    for kind, kind_docs in docs.items():
        for name, m in methods.items():
            label = f"**{name}**" if name == chosen["name"] else name
            lines.append(f"| {kind} ({len(kind_docs)}) | {label} | "
                         + " | ".join(_cell(w, len(kind_docs) >= 2) for w in m["windows"][kind]) + " |")
    lines.append(_documents_note(r))
    needles = r.get("needles")
    if needles:
        lines.append(f"needle prompts ({needles['prompts']} per method, {needles['prompt_tokens']:,} tokens and up to "
                     f"{needles['max_new_tokens']} generated): "
                     + ", ".join(f"{n} {x['found']:g}/{x['prompts']}" for n, x in needles["methods"].items()))
    f = r.get("finetune")
    if f:
        held = f.get("held_out")
        lines.append(f"fine-tune: {f['name']}, {f['steps']} steps of PoSE, {_wall(f)} ({f['why']})"
                     + (f"; held-out perplexity {held['first']['perplexity']:.3f} -> {held['last']['perplexity']:.3f}"
                        if held else "") + f"; model: {f['model']}")
    c = r["costs"]
    lines.append(f"CPU s of the reads: validation {c['validation_cpu_seconds']:.0f}, test {c['test_cpu_seconds']:.0f}, "
                 f"needles {c['needles_cpu_seconds']:.0f}; {c['wall_seconds_this_call']:.0f} s wall for this call")
    if "files" in r:
        f = r["files"]
        lines.append(f"files: {f['model']} ({r['model']['form']} checkpoint, with its model card README.md), "
                     f"{f['json']}, {f['md']}" + (f", {f['chart']}" if "chart" in f else f" ({f.get('chart_note')})"))
    return "\n".join(lines)
