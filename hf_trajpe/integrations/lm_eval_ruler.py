"""RULER's prompts for lm-evaluation-harness: written into the local tasks' data folder, run as the
``hf_trajpe_ruler_<task>`` tasks (tag ``hf_trajpe_ruler``), scored with RULER's ``string_match_all``.

The harness's own ``ruler`` group downloads essays and QA sets; these tasks read prompts made offline by
:mod:`hf_trajpe.evaluation.ruler` with the model's tokenizer (prompts depend on it: their length is counted
in its tokens). Give the harness a ``max_length`` of at least the longest length plus the task's new tokens
(128 for the needle tasks): it cuts longer contexts from the left.

    >>> from hf_trajpe.integrations import lm_eval as he
    >>> from hf_trajpe.integrations.lm_eval_ruler import write_ruler_data
    >>> data = write_ruler_data("outputs/lm_eval_data", tokenizer, tasks=["niah_single_1"], lengths=[2048])
    >>> he.evaluate(model, tokenizer, ["hf_trajpe_ruler"], data, max_length=2048 + 128)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from .lm_eval_data import _write_jsonl, ruler_path

__all__ = ["write_ruler_data"]


def write_ruler_data(out_dir: str | os.PathLike, tokenizer, tasks: Sequence[str] | None = None,
                     lengths: Sequence[int] = (4096,), samples: int = 5, haystacks: Sequence[str] | None = None,
                     seed: int = 0) -> Path:
    """Write ``ruler/<task>.jsonl`` (every length and haystack of the task, ``samples`` prompts each) into
    ``out_dir`` and record them in its ``manifest.json`` (kept, or started); returns ``out_dir``."""
    from ..evaluation.ruler import make_samples, task_names

    tasks = list(tasks or task_names())
    out = Path(out_dir)
    rows: dict[str, list[dict]] = {t: [] for t in tasks}
    for s in make_samples(tokenizer, tasks, lengths, samples, haystacks, seed):
        rows[s.task].append({"prompt": s.prompt, "answers": s.answers, "target": ", ".join(s.answers),
                             "metric": s.metric, "length": s.length, "haystack": s.haystack, "index": s.index,
                             "tokens": s.tokens})
    for task, task_rows in rows.items():
        _write_jsonl(ruler_path(out, task), task_rows)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"content_types": [],
                                                                                        "tasks": []}
    manifest["ruler"] = {"tasks": tasks, "lengths": [int(n) for n in lengths], "samples": samples,
                         "haystacks": list(haystacks) if haystacks else None, "seed": seed,
                         "tokenizer": getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return out
