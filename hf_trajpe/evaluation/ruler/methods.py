"""RULER over named models and patches (the ``hf-trajpe eval --long-context --ruler`` command).

The prompts are made once with the tokenizer and read by every method, so two methods are compared on the
very same prompts. Each distinct model source is loaded once; each name that reads it is patched with its
options, run and unpatched in turn (as :mod:`hf_trajpe.evaluation.long_context_run` does).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .runner import RulerTable, make_samples, run_ruler

__all__ = ["evaluate_ruler"]


def evaluate_ruler(models: dict[str, str], patches: dict[str, dict] | None = None, tokenizer: str | None = None,
                   tasks: Sequence[str] | None = None, lengths: Sequence[int] = (4096,), samples: int = 5,
                   haystacks: Sequence[str] | None = None, seed: int = 0, progress: bool = True,
                   dtype: str = "float32") -> RulerTable:
    """``models``: name -> model source (folder, ``.gguf`` file or ``package:``); ``patches``: name -> options
    of :func:`hf_trajpe.patching.patch` (none: the model as loaded). ``dtype``: ``float32``, ``bfloat16`` or
    ``auto`` (:func:`hf_trajpe.precision.resolve_dtype`), the same for every method; the table's ``meta`` says which.
    Returns every method's rows in one table."""
    from ...data import load_tokenizer
    from ...loading import load_model
    from ...patching import patch
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
    for source, names in by_source.items():
        print(f"RULER: loading {source}", file=sys.stderr, flush=True)
        model = load_model(source).eval().to(torch_dtype)
        for name in names:
            options = dict(patches.get(name) or {})
            handle = patch(model, options.pop("encoding", "native"), **options) if name in patches else None
            try:
                table.extend(run_ruler(model, tok, prompts=prompts, seed=seed, method=name, progress=progress))
            finally:
                if handle is not None:
                    handle.unpatch()
    return table
