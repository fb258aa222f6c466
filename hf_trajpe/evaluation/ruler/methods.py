"""RULER over named models and patches (the ``hf-trajpe eval --long-context --ruler`` command).

The prompts are made once with the tokenizer and read by every method, so two methods are compared on the
very same prompts. Each distinct model source is loaded once; each name that reads it is patched with its
options, run and unpatched in turn (as :mod:`hf_trajpe.evaluation.long_context_run` does).

A long run (a 16k prompt of SmolLM2 takes minutes on a CPU) saves each row as it is scored to a rows file
(:mod:`.rows`: a header with what defines the run, then one row per line); run again with the same file, it
takes the rows already there and generates only the rest. Rows made in another dtype or seed, or by another
model or patch under a method's name, are refused rather than mixed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from .rows import RowsFile, read_rows_file, run_header
from .runner import RulerTable, make_samples, prompt_key, run_ruler

__all__ = ["evaluate_ruler", "read_rows_file"]


def evaluate_ruler(models: dict[str, str], patches: dict[str, dict] | None = None, tokenizer: str | None = None,
                   tasks: Sequence[str] | None = None, lengths: Sequence[int] = (4096,), samples: int = 5,
                   haystacks: Sequence[str] | None = None, seed: int = 0, progress: bool = True,
                   dtype: str = "float32", rows_file: str | Path | None = None) -> RulerTable:
    """``models``: name -> model source (folder, ``.gguf`` file or ``package:``); ``patches``: name -> options
    of :func:`hf_trajpe.patching.patch` (none: the model as loaded). ``dtype``: ``float32``, ``bfloat16`` or
    ``auto`` (:func:`hf_trajpe.precision.resolve_dtype`), the same for every method; the table's ``meta`` says which.
    ``rows_file``: where each row is saved as it is scored, and from where a rerun takes the rows already made.
    Returns every method's rows in one table."""
    from ...data import load_tokenizer
    from ...loading import load_model
    from ...patching import patch
    from ...patching.schemes.remap.units import resolve_boundary_ids
    from ...precision import resolve_dtype

    patches = patches or {}
    unknown = sorted(set(patches) - set(models))
    if unknown:
        raise ValueError(f"patch options for {', '.join(unknown)}, which no --model names")
    tok = load_tokenizer(tokenizer or next(iter(models.values())))
    prompts = make_samples(tok, tasks, lengths, samples, haystacks, seed)
    by_source: dict[str, list[str]] = {}
    for name, source in models.items():
        by_source.setdefault(source, []).append(name)
    torch_dtype, precision = resolve_dtype(dtype)
    table = RulerTable(meta={"methods": [], "patches": patches, "precision": precision})
    done, save = {}, None
    if rows_file is not None:
        # the dtype read in, not how it was chosen: a measured speed-up (in the table's meta) differs every run
        rows = RowsFile(rows_file, run_header(precision["dtype"], seed, {
            n: {"model": str(s), "patch": patches.get(n)} for n, s in models.items()}))
        done, save = rows.read(), rows.append
        if done:
            print(f"RULER: {len(done)} rows taken from {rows_file}", file=sys.stderr, flush=True)
    for source, names in by_source.items():
        todo = [n for n in names if not all(prompt_key(n, s) in done for s in prompts)]
        model = None
        if todo:
            print(f"RULER: loading {source}", file=sys.stderr, flush=True)
            model = load_model(source).eval().to(torch_dtype)
        for name in names:
            options = resolve_boundary_ids(dict(patches.get(name) or {}), tok)
            if name not in todo:  # every row saved by an earlier run: no model needed
                table.extend(run_ruler(None, tok, prompts=prompts, seed=seed, method=name, progress=False, done=done))
                continue
            handle = patch(model, options.pop("encoding", "native"), **options) if name in patches else None
            try:
                table.extend(run_ruler(model, tok, prompts=prompts, seed=seed, method=name, progress=progress,
                                       done=done, on_row=save))
            finally:
                if handle is not None:
                    handle.unpatch()
    return table
