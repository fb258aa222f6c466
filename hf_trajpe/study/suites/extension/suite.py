"""The extension study as a suite of the engine (:mod:`.engine`): how well each context-extension method
(position interpolation, NTK, dynamic NTK, YaRN, content-aware trajectory positions, ...) reads text longer
than a model's trained length ``T``, per content type.

Three parts, each optional after the first:

- ``pretrain``: small RoPE models (the ``model`` config, one per seed) trained at ``T`` on the seven content
  types mixed; then each method reads ``factor`` x ``T`` tokens of every type zero-shot, for every factor.
- ``finetune``: each pretrained model patched with a method at ``finetune.factor`` and trained a few steps at
  that length (the protocol of the PI and YaRN papers), then read like the pretrained ones.
- ``real``: a pretrained model (SmolLM2 by default) read past its trained length with each method: perplexity
  by window and passkey retrieval (:mod:`hf_trajpe.evaluation.long_context`). No training.

The statistics of the reads are :mod:`.eval`, the report :mod:`.report`.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ...config import experiment_config
from ...registry import register_suite
from ...rows import ROWS, save_rows
from ...runs import SUMMARY, Run, run_folder
from ...screen import first_screen
from ...suite import Part, Prepared, Suite
from .config import ExtensionStudyConfig, choice_of, method_options, value_name
from .eval import read_losses, test_blocks

__all__ = ["ExtensionSuite", "read_all"]

PRETRAIN, FINETUNE, REAL = "pretrain", "finetune", "real"
#: the name of the pretrained runs (the model as configured: RoPE)
PRETRAINED = "rope"


def _read_key(folder: str, options: dict | None, factor: float, count: int, split: str = "test") -> str:
    """What decides a read: the model (its folder and when it was trained), the method's options, the length,
    the number of sequences and the split (the data is the study's, fixed by its fingerprint)."""
    stamp = (Path(folder) / SUMMARY).stat().st_mtime_ns
    return json.dumps([str(folder), stamp, options, float(factor), count] + ([split] if split != "test" else []),
                      sort_keys=True)


def _load_reads(cache: Path | None) -> dict:
    """The finished reads of ``cache`` (tensors, loaded with ``weights_only``) as NumPy arrays."""
    if cache is None or not cache.exists():
        return {}
    saved = torch.load(cache, weights_only=True)
    return {k: {kind: {n: t.numpy() for n, t in sc.items()} for kind, sc in v.items()} for k, v in saved.items()}


def _pooled_loss(scores: dict) -> float:
    """The mean loss over every sequence of every type of one read (what a choice on validation minimises)."""
    return float(np.mean(np.concatenate([s["whole"] for s in scores.values()])))


def read_all(models: dict[int, str | dict[str, str | list[str]]], methods: dict[str, dict | None],
             factors: list[float], streams: dict, trained: int, count: int, batch_size: int, progress: bool,
             label: str, patch_at_read: bool = True, cache: Path | None = None, validation: dict | None = None,
             chosen: dict | None = None, validation_count: int | None = None) -> dict:
    """``{method: {factor: {type: {"whole": [per seed [N]], "past": [...]}}}}``: every seed's model read at
    ``factor`` x ``trained`` tokens of each type's test stream. ``patch_at_read``: ``models`` are seed -> folder,
    and each method is patched onto the loaded model at the read's factor (zero-shot); otherwise ``models`` are
    seed -> {method: folder} of fine-tuned models, read as saved (a method that chooses an option: one folder per
    value, in the order of its values). ``validation``: each type's validation stream, on which a method that
    chooses an option (:func:`~.config.choice_of`) reads every value, per seed and factor, and keeps the one with
    the lowest loss over its first ``validation_count`` sequences per type (None: ``count``); ``chosen`` is filled
    with ``{method: {factor: [per seed {"seed", "value", "validation_loss": {value: loss}}]}}``. ``cache``: a file
    of finished reads, reused and extended (a study run again re-reads nothing that has not changed)."""
    from tqdm.auto import tqdm

    from ....evaluation import load_model
    from ....patching import patch

    done = _load_reads(cache)
    blocks = {"test": {f: test_blocks(streams, int(round(f * trained)), count) for f in factors}}
    if validation is not None:
        blocks["validation"] = {f: test_blocks(validation, int(round(f * trained)), validation_count or count)
                                for f in factors}
        short = [f for f, b in blocks["validation"].items() if not b]
        if short and any(choice_of(o) is not None for o in methods.values()):
            raise ValueError(f"the validation split holds fewer than 2 sequences of {int(round(short[0] * trained))} "
                             "tokens in every type, so no value can be chosen on it: raise data.validation")
    loaded: dict = {"folder": None, "model": None}

    def read(folder: str, options: dict | None, f: float, split: str) -> dict:
        key = _read_key(folder, options, f, count if split == "test" else validation_count or count, split)
        if key not in done:
            if loaded["folder"] != folder:
                loaded["model"] = None
                gc.collect()
                loaded.update(folder=folder, model=load_model(folder))
            model, handle = loaded["model"], None
            if options is not None:
                options = dict(options)
                handle = patch(model, options.pop("encoding"), **options)
            try:
                done[key] = {kind: read_losses(model, b, trained, batch_size) for kind, b in blocks[split][f].items()}
            finally:
                if handle is not None:
                    handle.unpatch()
        return done[key]

    bar = tqdm(total=len(models) * len(methods) * len(factors), desc=f"{label}: reading", unit="read",
               disable=not progress, file=sys.stderr)
    out: dict = {}
    for seed, folders in sorted(models.items()):
        for method, opts in methods.items():
            choice = choice_of(opts)
            for f in factors:
                if choice is None:
                    folder = folders if patch_at_read else folders[method]
                    scores = read(folder, method_options(opts, f) if patch_at_read else None, f, "test")
                else:
                    if validation is None:
                        raise ValueError(f"{method} chooses {choice[0]} on validation data: give the validation "
                                         "streams")
                    candidates = [(v, folders if patch_at_read else folders[method][i],
                                   method_options(opts, f, v) if patch_at_read else None)
                                  for i, v in enumerate(choice[1])]
                    losses = [_pooled_loss(read(*c[1:], f, "validation")) for c in candidates]
                    best = int(np.argmin(losses))
                    if chosen is not None:
                        chosen.setdefault(method, {}).setdefault(f"{f:g}", []).append(
                            {"seed": seed, "value": candidates[best][0],
                             "validation_loss": {repr(c[0]): loss for c, loss in zip(candidates, losses, strict=True)}})
                    scores = read(*candidates[best][1:], f, "test")
                for kind, sc in scores.items():
                    cell = out.setdefault(method, {}).setdefault(f"{f:g}", {}).setdefault(
                        kind, {"whole": [], "past": []})
                    for name, value in sc.items():
                        cell[name].append(value)
                bar.update(1)
        if cache is not None:
            torch.save({k: {kind: {n: torch.from_numpy(a) for n, a in sc.items()} for kind, sc in v.items()}
                        for k, v in done.items()}, cache)
    loaded["model"] = None
    gc.collect()
    bar.close()
    return out


@register_suite
class ExtensionSuite(Suite):
    name = "extension"
    config = ExtensionStudyConfig

    def parts(self, cfg: ExtensionStudyConfig, log) -> list[Part]:
        parts = [Part(PRETRAIN, {"part": PRETRAIN}, "pretrain: ")]
        if cfg.finetune is not None:
            parts.append(Part(FINETUNE, {"part": FINETUNE}, "finetune: "))
        if cfg.real is not None:
            problem = cfg.real_model_problem()
            if problem is not None:
                log(f"skipping the real model (the report says so): {problem}")
            else:
                parts.append(Part(REAL, {"part": REAL}, "real: "))
        return parts

    def prepare(self, cfg: ExtensionStudyConfig, part: Part, out: Path, log) -> Prepared:
        if part.name == REAL:
            return Prepared(out / ROWS, cfg.real.length)
        from ....data import save_all
        from ....training import RunData, build_run_data, load_run_tokenizer

        data_dir = out / "data"
        if not (data_dir / "manifest.json").exists():
            import datasets

            log(f"building the content-type datasets into {data_dir}")
            quiet = datasets.utils.are_progress_bars_disabled()
            datasets.disable_progress_bars()
            try:
                save_all(data_dir, sizes={"train": cfg.data.train, "validation": cfg.data.validation,
                                    "test": cfg.data.test},
                         seed=cfg.data.seed, progress=False)
            finally:
                if not quiet:
                    datasets.enable_progress_bars()
        length = cfg.data.block_size if part.name == PRETRAIN else int(round(cfg.finetune.factor * cfg.data.block_size))
        rows = out / (ROWS if part.name == PRETRAIN else f"train_rows_{length}.pt")
        if not rows.exists():
            exp = experiment_config(cfg, PRETRAINED, None, cfg.seeds[0], out)
            exp.data.block_size = length
            blocks = build_run_data(exp.data, load_run_tokenizer(exp.model), exp.model.task).train
            save_rows(rows, RunData(blocks, {}, list(exp.data.content_types)))
            log(f"{len(blocks)} training blocks of {length} tokens")
        return Prepared(rows, length, {"data_dir": data_dir})

    def plan(self, cfg: ExtensionStudyConfig, part: Part, out: Path) -> list[Run]:
        if part.name == PRETRAIN:
            return [Run(PRETRAINED, s, None, run_folder(out / "models" / PRETRAIN, PRETRAINED, s)) for s in cfg.seeds]
        if part.name == FINETUNE:  # a method that chooses an option on validation: one run per value
            ft, runs = cfg.finetune, []
            for m in ft.methods:
                choice = choice_of(cfg.methods[m])
                for value in [None] if choice is None else choice[1]:
                    name = m if choice is None else f"{m}_{value_name(value)}"
                    runs += [Run(name, s, method_options(cfg.methods[m], ft.factor, value),
                                 run_folder(out / "models" / FINETUNE, name, s)) for s in cfg.seeds]
            return runs
        return []

    def experiment(self, cfg: ExtensionStudyConfig, part: Part, prepared: Prepared, run: Run) -> dict:
        work = run.folder.with_name(run.folder.name + ".tmp")
        exp = experiment_config(cfg, run.name, run.options, run.seed, work).to_dict()
        if part.name == FINETUNE:  # from the pretrained model of the same seed, at the longer length
            ft = cfg.finetune
            exp["model"] = {"path": str(cfg.pretrained_folder(run.seed)), "task": "clm", "tokenizer": cfg.tokenizer}
            exp["data"]["block_size"] = prepared.length
            exp["optimizer"]["lr"] = ft.lr
            exp["schedule"]["warmup_steps"] = ft.warmup_steps
            exp["train"].update(max_steps=ft.steps, batch_size=ft.batch_size)
        return exp

    def evaluate(self, cfg: ExtensionStudyConfig, part: Part, prepared: Prepared, runs: list[Run], progress: bool,
                 log) -> dict:
        started = time.process_time()
        if part.name == REAL:
            result = self._real(cfg, progress, log)
        else:
            from ....data import load_tokenizer
            from ....data.registry import names
            from ....evaluation import content_streams

            tokenizer, data_dir = load_tokenizer(cfg.tokenizer), prepared.extra["data_dir"]
            streams = content_streams(sorted(names()), tokenizer, "clm", data_dir=data_dir)
            validation = (content_streams(sorted(names()), tokenizer, "clm", data_dir=data_dir, split="validation")
                          if cfg.data.validation else None)
            T, ev, chosen = cfg.data.block_size, cfg.eval, {}
            if part.name == PRETRAIN:
                models = {r.seed: str(r.folder) for r in runs}
                methods = cfg.zero_shot_methods()
                log(f"reading with {len(methods)} methods at {', '.join(f'{f:g}x' for f in ev.factors)} {T} tokens")
                scores = read_all(models, methods, ev.factors, streams, T, ev.max_sequences, ev.batch_size,
                                  progress, part.name, cache=Path(cfg.output_dir) / "reads_pretrain.pt",
                                  validation=validation, chosen=chosen, validation_count=ev.validation_sequences)
            else:
                folder = {(r.name, r.seed): str(r.folder) for r in runs}
                folders: dict[int, dict] = {}
                for m in cfg.finetune.methods:
                    choice = choice_of(cfg.methods[m])
                    for s in cfg.seeds:
                        folders.setdefault(s, {})[m] = (folder[m, s] if choice is None else
                                                        [folder[f"{m}_{value_name(v)}", s] for v in choice[1]])
                methods = {m: cfg.methods[m] for m in cfg.finetune.methods}
                log(f"reading the fine-tuned models at {', '.join(f'{f:g}x' for f in ev.factors)} {T} tokens")
                scores = read_all(folders, methods, ev.factors, streams, T, ev.max_sequences, ev.batch_size,
                                  progress, part.name, patch_at_read=False,
                                  cache=Path(cfg.output_dir) / "reads_finetune.pt", validation=validation,
                                  chosen=chosen, validation_count=ev.validation_sequences)
            result = {"scores": scores, **({"chosen": chosen} if chosen else {})}
        result["eval_cpu_seconds"] = time.process_time() - started
        return result

    def _real(self, cfg: ExtensionStudyConfig, progress: bool, log) -> dict:
        """The real model read with each method in turn; each method's result is kept in ``output_dir/real.json``
        as soon as it is read, so a stopped study resumes with the methods not read yet."""
        from ....evaluation.long_context_run import evaluate_long_context

        r = cfg.real
        names = cfg.real_methods()
        patches = {m: method_options(cfg.methods[m], r.factor) for m in names}
        cache = Path(cfg.output_dir) / "real.json"
        key = json.dumps({k: v for k, v in dataclasses.asdict(r).items() if k != "methods"}, sort_keys=True)
        saved = json.loads(cache.read_text()) if cache.exists() else {}
        if saved.get("key") != key:
            saved = {"key": key, "reads": {}}
        reads = saved["reads"]
        todo = [m for m in names if m not in reads or reads[m]["patch"] != patches[m]]
        if len(todo) < len(names):
            log(f"reusing the real model's reads of {len(names) - len(todo)} method(s) from {cache}")
        for i, name in enumerate(todo, 1):
            log(f"[{i}/{len(todo)}] reading {r.model} at {r.length} tokens with {name} (factor {r.factor:g})")
            one = evaluate_long_context({name: r.model}, {name: patches[name]} if patches[name] else {},
                                        tokenizer=r.tokenizer, length=r.length, kinds=r.kinds, documents=r.documents,
                                        passkey_lengths=r.passkey_lengths, passkey_depths=r.passkey_depths,
                                        n_resamples=r.n_resamples, progress=progress)
            reads[name] = {"patch": patches[name], "entry": one["models"][name], "cpu_seconds": one["cpu_seconds"],
                           "meta": {k: one[k] for k in ("length", "edges", "kinds", "trained_length", "documents")}}
            cache.write_text(json.dumps(saved, default=str) + "\n")
        meta = reads[names[0]]["meta"]
        return {**meta, "models": {m: reads[m]["entry"] for m in names},
                "patches": {m: p for m, p in patches.items() if p is not None},
                "cpu_seconds": sum(reads[m]["cpu_seconds"] for m in names)}

    def report(self, cfg: ExtensionStudyConfig, results: dict, summaries: list[dict], timing: dict, versions: dict,
               command: str | None) -> dict[str, Path]:
        from .report import write_extension_report

        return write_extension_report(cfg, results, summaries, timing, versions, command)

    def first_screen(self, paths: dict[str, Path]) -> str:
        return first_screen(paths["study_md"].read_text())
