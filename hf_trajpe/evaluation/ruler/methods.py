"""RULER over named models and patches (the ``hf-trajpe eval --long-context --ruler`` command).

The prompts are made once with the tokenizer and read by every method, so two methods are compared on the
very same prompts. Each distinct model source is loaded once; each name that reads it is patched with its
options, run and unpatched in turn (as :mod:`hf_trajpe.evaluation.long_context_run` does).

A long run (a 16k prompt of SmolLM2 takes minutes on a CPU) saves each row as it is scored to a rows file
(:mod:`.rows`: a header with what defines the run, then one row per line); run again with the same file, it
takes the rows already there and generates only the rest. Rows made in another dtype or seed, or by another
model or patch under a method's name, are refused rather than mixed.

Under a launcher that started several processes (``accelerate launch``, ``torchrun``: :mod:`.processes`), each
process generates its share of the prompts still to make and saves its rows to a part file beside the rows
file; the main process folds the parts into the rows file in the order one process would have written them
(after the rows already there), and every process returns the whole table.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

from .processes import Processes, launched
from .rows import RowsFile, part_path, read_rows_file, run_header
from .runner import RulerTable, make_samples, prompt_key, run_ruler

__all__ = ["evaluate_ruler", "read_rows_file"]


def evaluate_ruler(models: dict[str, str], patches: dict[str, dict] | None = None, tokenizer: str | None = None,
                   tasks: Sequence[str] | None = None, lengths: Sequence[int] = (4096,), samples: int = 5,
                   haystacks: Sequence[str] | None = None, seed: int = 0, progress: bool = True,
                   dtype: str = "float32", rows_file: str | Path | None = None,
                   processes: Processes | None = None, device: str = "cpu") -> RulerTable:
    """``models``: name -> model source (folder, ``.gguf`` file or ``package:``); ``patches``: name -> options
    of :func:`hf_trajpe.patching.patch` (none: the model as loaded). ``dtype``: ``float32``, ``bfloat16`` or
    ``auto`` (:func:`hf_trajpe.precision.resolve_dtype`), the same for every method; the table's ``meta`` says which.
    ``rows_file``: where each row is saved as it is scored, and from where a rerun takes the rows already made.
    ``processes``: those to spread the prompts over (default: :func:`.processes.launched`, one process when no
    launcher started several). ``device``: where one process reads (``cpu``, ``cuda``, ``cuda:1``); processes
    spread by a launcher take a GPU each where there are GPUs. Returns every method's rows in one table, in every
    process."""
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
    definitions = {n: {"model": str(s), "patch": patches.get(n)} for n, s in models.items()}
    processes = processes or launched()
    if processes.world > 1:
        return _evaluate_spread(processes, by_source, patches, tok, prompts, seed, progress, dtype, rows_file,
                                definitions)
    import torch

    if device != "cpu" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: torch sees no GPU here ({torch.__version__}); read on the CPU (cpu)")
    torch_dtype, precision = resolve_dtype(dtype, device)
    table = RulerTable(meta={"methods": [], "patches": patches, "precision": precision})
    done, save = {}, None
    if rows_file is not None:
        # the dtype read in, not how it was chosen: a measured speed-up (in the table's meta) differs every run
        rows = RowsFile(rows_file, run_header(precision["dtype"], seed, definitions))
        done, save = rows.fold(_run_order(by_source, prompts)), rows.append
        if done:
            print(f"RULER: {len(done)} rows taken from {rows_file}", file=sys.stderr, flush=True)
    for source, names in by_source.items():
        todo = [n for n in names if not all(prompt_key(n, s) in done for s in prompts)]
        model = None
        if todo:
            print(f"RULER: loading {source}", file=sys.stderr, flush=True)
            model = load_model(source).eval().to(torch_dtype).to(device)
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


def _run_order(by_source: dict[str, list[str]], prompts: Sequence) -> list[str]:
    """The keys of a run's rows in the order one process makes them (each prompt's text hashed once)."""
    stubs = [{"task": s.task, "haystack": s.haystack, "length": s.length, "index": s.index,
              "prompt_sha1": hashlib.sha1(s.prompt.encode()).hexdigest()} for s in prompts]
    return [prompt_key(name, stub) for names in by_source.values() for name in names for stub in stubs]


def _evaluate_spread(processes: Processes, by_source: dict[str, list[str]], patches: dict[str, dict], tok,
                     prompts: Sequence, seed: int, progress: bool, dtype: str, rows_file: str | Path | None,
                     definitions: dict[str, dict]) -> RulerTable:
    """:func:`evaluate_ruler` over several processes: the main process alone chooses the dtype and folds the
    rows file (its refusals stop every process); each then makes every ``world``-th prompt still missing of each
    method, saving to its part file; the rows are gathered, and the main process folds the parts again."""
    from ...loading import load_model
    from ...patching import patch
    from ...patching.schemes.remap.units import resolve_boundary_ids
    from ...precision import DTYPES, resolve_dtype

    rank, world, device = processes.rank, processes.world, processes.device()
    order = _run_order(by_source, prompts)
    error, done, precision = None, {}, None
    if processes.main:
        try:
            precision = resolve_dtype(dtype, device)[1]  # chosen once: every process reads in the same dtype
            if rows_file is not None:
                done = RowsFile(rows_file, run_header(precision["dtype"], seed, definitions)).fold(order)
        except (ValueError, OSError) as err:
            error = err
    message, done, precision = processes.broadcast((None if error is None else str(error), done, precision))
    if error is not None:
        raise error
    if message is not None:
        raise ValueError(message)
    if processes.main and done:
        print(f"RULER: {len(done)} rows taken from {rows_file}", file=sys.stderr, flush=True)
    header = run_header(precision["dtype"], seed, definitions)
    save = RowsFile(part_path(rows_file, rank), header).append if rows_file is not None else None
    missing = {name: [s for s in prompts if prompt_key(name, s) not in done]
               for names in by_source.values() for name in names}
    shares = {name: processes.share(todo) for name, todo in missing.items()}
    print(f"RULER: process {rank} of {world} ({device}) makes {sum(map(len, shares.values()))} of the "
          f"{sum(map(len, missing.values()))} prompts still to make", file=sys.stderr, flush=True)
    made: list[dict] = []
    for source, names in by_source.items():
        names = [n for n in names if shares[n]]
        if not names:
            continue
        if processes.main:
            print(f"RULER: loading {source}", file=sys.stderr, flush=True)
        model = load_model(source).eval().to(DTYPES[precision["dtype"]]).to(device)
        for name in names:
            options = resolve_boundary_ids(dict(patches.get(name) or {}), tok)
            handle = patch(model, options.pop("encoding", "native"), **options) if name in patches else None
            try:
                made += run_ruler(model, tok, prompts=shares[name], seed=seed, method=name,
                                  progress=progress and processes.main, on_row=save).rows
            finally:
                if handle is not None:
                    handle.unpatch()
        del model
    for rows in processes.gather(made):  # (every process waits here until all are done)
        done.update((prompt_key(r["method"], r), r) for r in rows)
    if processes.main and rows_file is not None:
        RowsFile(rows_file, header).fold(order)
    table = RulerTable(meta={"methods": [], "patches": patches, "precision": precision})
    for names in by_source.values():
        for name in names:
            table.extend(run_ruler(None, tok, prompts=prompts, seed=seed, method=name, progress=False, done=done))
    return table
