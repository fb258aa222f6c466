"""``extend``: from a RoPE model and validation text to the longer-context model chosen on evidence.

The order, so that nothing read can bend the choice: the candidates' settings come from each method's formula
(:mod:`.candidates`) and the rule (:mod:`.rule`) is fixed; both are written into ``extension.json`` before any
read. Then every candidate, stock first, reads the validation documents; the rule chooses; stock, YaRN and the
choice read the test documents per kind of text (other files than the validation ones), and a few RULER needle
prompts. Every read is saved as it finishes, so the same call continues an interrupted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..evaluation.long_context import LONG_KINDS, WINDOW_EDGES, perplexity_by_window, token_nll
from .candidates import DEFAULT_METHODS, STOCK, YARN, Candidate, build_candidates, yarn_candidate
from .finetune import FINETUNE_DIR, FinetunePlan, experiment_config, launch_files, plan_finetune, run_finetune
from .rule import Rule, Spans, spans
from .store import RunFolder
from .texts import check_apart, fingerprint, test_documents, validation_documents

__all__ = ["NEEDLE_NEW_TOKENS", "NEEDLE_TASK", "Extension", "check_model", "extend", "model_fingerprint"]

#: the RULER task of the needle prompts: one number under one key, in RULER's noise haystack
NEEDLE_TASK = "niah_single_1"
#: tokens generated per needle prompt: the answer (a seven-digit number) comes right after RULER's answer prefix, so
#: RULER's 128 would only lengthen each prompt's decoding; the prompt and its answer together fit the target length
NEEDLE_NEW_TOKENS = 32


@dataclass
class Extension:
    """What :func:`extend` chose and measured: ``chosen`` (the candidate), ``record`` (everything
    ``extension.json`` holds), ``handle`` (the patch left on the model; ``None`` when stock was chosen) and
    ``paths`` (the files written, when ``out`` was given)."""

    chosen: Candidate
    record: dict
    handle: object | None = None
    paths: dict[str, Path] = field(default_factory=dict)

    @property
    def encoding(self) -> str | None:
        return self.chosen.encoding

    @property
    def options(self) -> dict:
        return self.chosen.patch_options()[1] if self.chosen.options else {}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def check_model(model, trained_length: int | None = None) -> int:
    """The trained length of a model with rotary positions (``trained_length`` when given); a ``ValueError``
    saying what the model supports instead when it has none."""
    from ..patching.families import adapter_for
    from ..patching.rope_scaling import trained_length as config_trained_length

    name = f"{type(model).__name__} ({getattr(model.config, 'model_type', '?')})"
    try:
        family = adapter_for(model)
    except NotImplementedError as err:
        raise ValueError(f"{name}: {err}; extend reads causal models with rotary positions (Llama, Qwen2, Mistral, "
                         "Gemma, GPT-NeoX, ...)") from None
    if not family.rotary_path:
        raise ValueError(f"{name} has {family.native} positions, not rotary ones, so there is no rotation to stretch: "
                         "extend reads models with a rotary module (Llama, Qwen2, Mistral, Gemma, GPT-NeoX, ...); "
                         f"hf_trajpe.patch swaps this model's encoding instead ({', '.join(family.encodings)})")
    if model.get_output_embeddings() is None:
        raise ValueError(f"{name} has no language-model head: extend measures the loss of each next token; load it "
                         "as a causal LM (AutoModelForCausalLM)")
    trained = trained_length or config_trained_length(model.config)
    if not trained:
        raise ValueError(f"{name}: its config says no trained length (max_position_embeddings); give it "
                         "(--trained-length)")
    return int(trained)


def _config_trained_length(model) -> int | None:
    from ..patching.rope_scaling import trained_length as config_trained_length

    return config_trained_length(model.config)


def model_fingerprint(model) -> str:
    """A short hash of the weights (a sum per tensor): the same model, or not, whoever loaded it."""
    import hashlib

    sums = ",".join(f"{n}:{float(p.detach().double().sum()):.9e}" for n, p in model.named_parameters())
    return hashlib.sha1(sums.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _in_dtype(model, dtype: torch.dtype) -> Iterator[None]:
    """The model in ``dtype`` for the reads, and afterwards its own tensors again, bit for bit (kept aside, not
    cast back: a round trip through bfloat16 would round them)."""
    own = next(model.parameters()).dtype
    if dtype == own:
        yield
        return
    params = [(p, p.data) for p in model.parameters()]
    buffers = [(m, n, b) for m in model.modules() for n, b in m._buffers.items() if b is not None]
    model.to(dtype)
    try:
        yield
    finally:
        for p, data in params:
            p.data = data
        for m, n, b in buffers:
            m._buffers[n] = b


def _patch(model, candidate: Candidate):
    from ..patching import patch

    if candidate.options is None:
        return None
    encoding, options = candidate.patch_options()
    return patch(model, encoding, **options)


def _read_stage(model, folder: RunFolder | None, stage: str, candidates: Sequence[Candidate],
                docs: Sequence[tuple[str, dict]], refused: dict[str, str], progress: bool) -> dict[str, dict]:
    """Each candidate reads each document (saved reads taken as they are): ``name -> {key: {"nll",
    "cpu_seconds", "source"}}``; a candidate the model refuses goes to ``refused`` with the reason."""
    from tqdm.auto import tqdm

    out: dict[str, dict] = {}
    bar = tqdm(total=len(candidates) * len(docs), desc=f"{stage} reads", unit="read", disable=not progress,
               file=sys.stderr)
    taken = 0
    try:
        for cand in candidates:
            reads = {}
            for key, _ in docs:
                saved = folder.read(stage, cand.name, key) if folder is not None else None
                if saved is not None:
                    reads[key] = saved
            todo = [(key, doc) for key, doc in docs if key not in reads]
            taken += len(reads)
            bar.update(len(reads))
            if todo and cand.name not in refused:
                try:
                    handle = _patch(model, cand)
                except (ValueError, NotImplementedError) as err:
                    refused[cand.name] = str(err)
                    _log(f"extend: {cand.name} refused by this model: {err}")
                    handle = None
                if cand.name not in refused:
                    try:
                        for key, doc in todo:
                            bar.set_postfix_str(f"{cand.name} {doc['source']}"[:60], refresh=True)
                            started = time.process_time()
                            nll = token_nll(model, doc["ids"])
                            cpu = time.process_time() - started
                            reads[key] = {"nll": nll, "cpu_seconds": cpu, "source": doc["source"]}
                            if folder is not None:
                                folder.save(stage, cand.name, key, doc["source"], nll, cpu)
                            bar.update(1)
                    finally:
                        if handle is not None:
                            handle.unpatch()
            if cand.name in refused:
                bar.update(len(todo))
            else:
                out[cand.name] = reads
    finally:
        bar.close()
    if taken:
        _log(f"extend: {taken} {stage} read(s) taken from {folder.path if folder else 'an earlier run'}")
    return out


def _windows(nlls: Sequence[torch.Tensor], trained: int, n_resamples: int) -> list[dict]:
    return [vars(w) | {"label": w.label} for w in perplexity_by_window(list(nlls), trained, WINDOW_EDGES, n_resamples)]


def _needles(model, tokenizer, methods: Sequence[Candidate], samples, folder: RunFolder | None, dtype_name: str,
             seed: int, model_id: str, progress: bool, rows_name: str = "needles.jsonl") -> dict:
    from ..evaluation.ruler.rows import RowsFile, run_header
    from ..evaluation.ruler.runner import prompt_key, run_ruler

    done, save = {}, None
    if folder is not None:
        rows = RowsFile(folder.path / "reads" / rows_name, run_header(dtype_name, seed, {
            c.name: {"model": model_id, "patch": c.options} for c in methods}))
        done, save = rows.read(), rows.append
    out = {}
    for cand in methods:
        handle = None
        if not all(prompt_key(cand.name, s) in done for s in samples):
            handle = _patch(model, cand)
        try:
            table = run_ruler(model, tokenizer, prompts=samples, seed=seed, method=cand.name, progress=progress,
                              done=done, on_row=save)
        finally:
            if handle is not None:
                handle.unpatch()
        rows_ = table.rows
        out[cand.name] = {"found": sum(r["score"] for r in rows_), "prompts": len(rows_),
                          "cpu_seconds": sum(r.get("cpu_seconds", 0.0) for r in rows_),
                          "rows": [{k: r.get(k) for k in ("index", "tokens", "answers", "prediction", "score")}
                                   for r in rows_]}
    return out


def _versions() -> dict:
    import platform

    import transformers

    from .. import __version__

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "hf_trajpe": __version__}


def _cpu(dtype: torch.dtype) -> dict:
    from ..benchmarks.machine import machine_info

    info = machine_info("cpu", dtype)
    return {k: info.get(k) for k in ("cpu", "cpu_bfloat16", "cpu_count", "torch_threads", "platform", "date_utc",
                                     "load_average")}


def extend(model, tokenizer, target_length: int,
           validation: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
           methods: Sequence[str] = DEFAULT_METHODS, *, trained_length: int | None = None,
           out: str | os.PathLike | None = None, kinds: Sequence[str] = LONG_KINDS, documents: int = 2,
           validation_documents_count: int = 3, ruler_prompts: int = 0, tolerance: float = 1.0,
           dtype: str | torch.dtype | None = None, seed: int = 0, n_resamples: int = 2000, progress: bool = True,
           source: str | None = None, tokenizer_source: str | None = None, notes: Sequence[str] = (),
           finetune_steps: int = 0, finetune_overrides: Sequence[str] = (),
           accelerate_config: str | os.PathLike | None = None, threads: int | None = None) -> Extension:
    """Choose how ``model`` reads ``target_length`` tokens, on evidence, and leave it patched with the choice.

    ``validation``: text files or folders to choose on (default: this machine's real text of the validation split,
    ``validation_documents_count`` documents from ``kinds`` in turn); ``methods``: the candidates
    (:data:`~.candidates.METHODS`; stock is always one); ``trained_length``: the length to extend from (default:
    the config's). The test documents: ``documents`` per kind of ``kinds`` (other files). ``ruler_prompts``: RULER
    needle prompts of ``target_length`` tokens for stock, YaRN and the choice. ``tolerance``: the rule's percent
    (:class:`~.rule.Rule`). ``dtype``: ``None`` (as the model is), ``float32``, ``bfloat16`` or ``auto``
    (:func:`hf_trajpe.precision.resolve_dtype`); the model gets its own tensors back afterwards. ``out``: a folder
    for the reads (resumable), ``extension.json``, ``extension.md``, the chart and the saved model (``model/``);
    ``None``: nothing written. ``source``/``tokenizer_source``: where the model and tokenizer came from, for the
    record and the model card; ``notes``: sentences for the record, the report and the card (a profile's choice).
    ``finetune_steps``: after the choice, train the chosen frequency scaling (or, for a remap, the best one) with
    PoSE for that many steps on ``validation`` (else this machine's real text of the train split) through the
    accelerate recipe (``accelerate_config``: one CPU process unless given; ``finetune_overrides``: dotted
    ``key=value`` over its config; ``threads`` per process), and read the tuned model on the same test documents
    and needle prompts (:mod:`.finetune`); needs ``out``.

    Returns an :class:`Extension`; raises ``ValueError`` (one line) for a target at or below the trained length, a
    model without rotary positions, validation text too short for the target, an unknown method, or a folder of
    another run."""
    from ..data import load_tokenizer
    from ..evaluation.ruler.runner import make_samples
    from ..precision import resolve_dtype
    from .candidates import check_methods

    wall = time.perf_counter()
    methods = check_methods(methods)
    tok = load_tokenizer(tokenizer)
    trained = check_model(model, trained_length)
    target = int(target_length)
    if target <= trained:
        raise ValueError(f"--to {target:,} is not past the trained length {trained:,} of this model: there is nothing "
                         f"to extend; give a longer target, e.g. --to {2 * trained} (2x)")
    if isinstance(validation, (str, os.PathLike)):
        validation = [validation]
    if finetune_steps and out is None:
        raise ValueError("a fine-tune writes its run and model into the output folder: give out (--out)")
    rule = Rule(tolerance)
    candidates = build_candidates(trained, target, methods)
    yarn = next((c for c in candidates if c.name == YARN), None) or yarn_candidate(trained, target)
    val_docs = validation_documents(tok, target, validation, validation_documents_count, kinds)
    test_docs = test_documents(tok, target, kinds, documents)
    check_apart(val_docs, test_docs)
    samples = []
    if ruler_prompts:
        from ..evaluation.ruler.fitting import FitError

        length, error = target - NEEDLE_NEW_TOKENS, None
        for step in range(8):  # the fit lands within 1% of a length; a few lengths below it where one misses
            try:
                samples = make_samples(tok, [NEEDLE_TASK], [length - 4 * step], ruler_prompts, None, seed)
                break
            except FitError as err:
                error = err
        else:
            raise ValueError(f"--ruler-prompts: no needle prompt fits {target:,} tokens with its answer ({error})")
        samples = [dataclasses.replace(s, max_new_tokens=NEEDLE_NEW_TOKENS) for s in samples]
    if dtype is None:
        own = next(model.parameters()).dtype
        torch_dtype = own
        precision = {"requested": None, "dtype": str(own).removeprefix("torch."), "reason": "the model's own"}
    else:
        torch_dtype, precision = resolve_dtype(dtype)
    model_id = source or getattr(model.config, "_name_or_path", None) or type(model).__name__
    definition = {
        "model": {"source": model_id, "class": type(model).__name__, "weights": model_fingerprint(model)},
        "tokenizer": tokenizer_source or getattr(tok, "name_or_path", None) or type(tok).__name__,
        "trained_length": trained, "target_length": target,
        "candidates": {c.name: c.options for c in candidates},
        "rule": rule.to_dict(trained, target),
        "validation": [{"source": d["source"], "ids": fingerprint(d["ids"])} for d in val_docs],
        "test": {k: [{"source": d["source"], "ids": fingerprint(d["ids"])} for d in v] for k, v in test_docs.items()},
        "dtype": precision["dtype"], "seed": seed,
    }
    if finetune_steps:  # the fine-tune's files and config, checked before any read (its candidate: by the choice)
        launch_files(accelerate_config)
        _finetune_config(FinetunePlan(yarn, ""), finetune_steps, out, source, tokenizer_source, trained, target,
                         validation, precision["dtype"], seed, finetune_overrides)
    folder = RunFolder(out) if out is not None else None
    start_record = {"status": "reading", "run": definition, "rule": definition["rule"],
                    "candidates": [c.to_dict() for c in candidates]}
    if folder is not None:
        previous = folder.begin(definition, start_record)
        if previous is not None:
            _log(f"extend: continuing the run in {folder.path}")
    refused: dict[str, str] = {}
    with _in_dtype(model, torch_dtype):
        model.eval()
        val = _read_stage(model, folder, "validation", candidates, [(str(i), d) for i, d in enumerate(val_docs)],
                          refused, progress)
        if STOCK not in val:
            raise ValueError(f"the model as it is could not be read: {refused.get(STOCK)}")
        scores: dict[str, Spans] = {name: spans([r["nll"] for r in reads.values()], trained)
                                    for name, reads in val.items()}
        chosen_name = rule.choose(scores)
        chosen = next(c for c in candidates if c.name == chosen_name)
        _log(f"extend: chosen {chosen.name} (validation perplexity past {trained:,}: "
             f"{math.exp(scores[chosen.name].past):.3f}; stock {math.exp(scores[STOCK].past):.3f})")
        shown = list({c.name: c for c in (candidates[0], yarn, chosen)}.values())
        test_keys = [(f"{kind}-{i}", d) for kind, v in test_docs.items() for i, d in enumerate(v)]
        test = _read_stage(model, folder, "test", shown, test_keys, refused, progress)
        needles = {}
        if samples:
            needles = _needles(model, tok, [c for c in shown if c.name in test], samples, folder,
                               precision["dtype"], seed, model_id, progress)
    tuned = None
    if finetune_steps:
        plan = plan_finetune(candidates, chosen, {n: s.past for n, s in scores.items()}, yarn)
        cfg = _finetune_config(plan, finetune_steps, out, source, tokenizer_source, trained, target, validation,
                               precision["dtype"], seed, finetune_overrides, model=model, tokenizer=tok)
        _log(f"extend: fine-tune: {plan.why}; {finetune_steps} steps of PoSE")
        tuned = {"plan": plan, "cfg": cfg, **run_finetune(Path(out) / FINETUNE_DIR, cfg, accelerate_config, threads,
                                                         _log)}
        _read_tuned(tuned, tok, folder, test_keys, samples, torch_dtype, precision["dtype"], seed, progress, test,
                    needles, refused)
    record = _record(definition, rule, candidates, chosen, scores, val, refused, test, test_docs, needles, samples,
                     precision, torch_dtype, trained, target, n_resamples, time.perf_counter() - wall)
    if tuned is not None:
        record["finetune"] = _finetune_record(tuned, tuned["cfg"], validation)
        record["test"]["methods"][tuned["plan"].name]["options"] = tuned["plan"].candidate.options
        record["costs"]["finetune_wall_seconds_last_call"] = tuned["seconds_last_call"]
    record["notes"] = list(notes)
    record["config_trained_length"] = _config_trained_length(model)
    result = Extension(chosen, record)
    if folder is not None:
        from .report import write_outputs

        result.paths = write_outputs(model, tok, record, chosen, folder.path)
        folder.write(record)
    result.handle = _patch(model, chosen)
    return result


def _finetune_config(plan: FinetunePlan, steps: int, out, source, tokenizer_source, trained: int, target: int,
                     validation, dtype_name: str, seed: int, overrides, model=None, tokenizer=None) -> dict:
    """The recipe's config of the fine-tune; with ``model``, the model (and tokenizer) saved for the recipe first
    where ``source`` is not a file the recipe can load (a model built in Python, a hub name)."""
    from ..loading import PACKAGE_PREFIX

    folder = Path(out) / FINETUNE_DIR
    if source is not None and source.startswith(PACKAGE_PREFIX):
        model_path, local = source, True
    elif source is not None and Path(source).expanduser().exists():
        model_path, local = str(Path(source).expanduser().resolve()), True  # the same run from any folder
    else:
        model_path, local = str(folder / "base"), False
    tokenizer_path = tokenizer_source or model_path
    if tokenizer_path != model_path and Path(tokenizer_path).expanduser().exists():
        tokenizer_path = str(Path(tokenizer_path).expanduser().resolve())  # the same run from any folder
    if model is not None and not local and not (folder / "base" / "config.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder / "base")
        if tokenizer_source is None:
            tokenizer.save_pretrained(folder / "base")
    return experiment_config(plan, steps, source=model_path, tokenizer_source=tokenizer_path,
                             run_dir=(folder / "run").resolve(), trained=trained, target=target, files=validation,
                             dtype=dtype_name, seed=seed, overrides=overrides)


def _read_tuned(tuned: dict, tok, folder: RunFolder, test_keys, samples, torch_dtype, dtype_name: str, seed: int,
                progress: bool, test: dict, needles: dict, refused: dict) -> None:
    """The tuned model (loaded from the recipe's ``final/``) reads the test documents and needle prompts; its reads
    are added to ``test`` and ``needles`` under its name."""
    from ..patching import from_pretrained

    name, tag = tuned["plan"].name, tuned["config_id"]
    model = from_pretrained(tuned["model"]).eval()
    as_read = Candidate(name, None, "tuned", tuned["plan"].why)  # the model as saved: its own rope_parameters
    with _in_dtype(model, torch_dtype):  # its reads filed under its config: another fine-tune's are never taken
        test.update(_read_stage(model, folder, f"tuned-{tag}", [as_read], test_keys, refused, progress))
        if samples:
            needles.update(_needles(model, tok, [as_read], samples, folder, dtype_name, seed, tuned["model"], progress,
                                    rows_name=f"needles_tuned-{tag}.jsonl"))


def _finetune_record(tuned: dict, cfg: dict, validation) -> dict:
    plan, curve = tuned["plan"], tuned["curve"]
    return {"name": plan.name, "trained": plan.candidate.name, "options": plan.candidate.options, "why": plan.why,
            "steps": cfg["train"]["max_steps"], "text": [str(p) for p in validation] if validation else
            "this machine's real text, train split (no file of the test documents)", "model": tuned["model"],
            "command": tuned["command"], "config_id": tuned["config_id"],
            "seconds_last_call": tuned["seconds_last_call"], "curve": curve,
            "held_out": {"first": curve[0], "last": curve[-1]} if curve else None}


def _record(definition, rule, candidates, chosen, scores, val, refused, test, test_docs, needles, samples, precision,
            torch_dtype, trained, target, n_resamples, wall) -> dict:
    base = scores[STOCK]
    rows = []
    for c in candidates:
        row = c.to_dict()
        if c.name in scores:
            row["validation"] = scores[c.name].to_dict() | {
                "inside_vs_stock_percent": 100 * (math.exp(scores[c.name].inside - base.inside) - 1),
                "eligible": rule.eligible(scores[c.name], base),
                "cpu_seconds": sum(r["cpu_seconds"] for r in val[c.name].values())}
        row["refused"] = refused.get(c.name)
        rows.append(row)
    reports = {}
    for name, reads in test.items():
        per_kind = {kind: [reads[f"{kind}-{i}"]["nll"] for i in range(len(docs))] for kind, docs in test_docs.items()}
        windows = {"all": _windows([n for v in per_kind.values() for n in v], trained, n_resamples)}
        windows |= {kind: _windows(v, trained, n_resamples) for kind, v in per_kind.items()}
        options = next(c.options for c in candidates if c.name == name) if any(c.name == name for c in candidates) \
            else None
        if name == YARN and options is None:
            options = yarn_candidate(trained, target).options
        reports[name] = {"options": options, "windows": windows,
                         "cpu_seconds": sum(r["cpu_seconds"] for r in reads.values())}
    val_cpu = sum(r["cpu_seconds"] for reads in val.values() for r in reads.values())
    test_cpu = sum(r["cpu_seconds"] for r in reports.values())
    needle_cpu = sum(m["cpu_seconds"] for m in needles.values())
    encoding, options = chosen.patch_options() if chosen.options else (None, {})
    return {
        "status": "done",
        "run": definition,
        "rule": rule.to_dict(trained, target),
        "trained_length": trained,
        "target_length": target,
        "factor": target / trained,
        "candidates": rows,
        "chosen": {"name": chosen.name, "kind": chosen.kind, "encoding": encoding, "options": options,
                   "why": chosen.why},
        "validation": {"documents": [d["source"] for d in definition["validation"]]},
        "test": {"documents": {k: [d["source"] for d in v] for k, v in definition["test"].items()},
                 "methods": reports, "refused": {n: r for n, r in refused.items() if n not in test and n in
                                                 {STOCK, YARN, chosen.name}}},
        "needles": ({"task": NEEDLE_TASK, "haystack": "noise", "length": target, "prompts": len(samples),
                     "prompt_tokens": samples[0].length, "max_new_tokens": NEEDLE_NEW_TOKENS,
                     "methods": needles} if samples else None),
        "costs": {"validation_cpu_seconds": val_cpu, "test_cpu_seconds": test_cpu, "needles_cpu_seconds": needle_cpu,
                  "reads_cpu_seconds": val_cpu + test_cpu + needle_cpu, "wall_seconds_this_call": wall},
        "precision": precision,
        "versions": _versions(),
        "machine": _cpu(torch_dtype),
    }
