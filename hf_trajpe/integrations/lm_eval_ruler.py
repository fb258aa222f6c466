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

The harness's own ``ruler`` tasks whose haystacks it makes without a download (:data:`HARNESS_OFFLINE_TASKS`:
the noise of ``niah_single_1``, the distractor needles of ``niah_multikey_2`` and ``_3``) also run here, on a
patched model, given ``pip install "lm_eval[ruler]"`` and a tokenizer *folder* (the harness loads it by path
to size its prompts): :func:`run_harness_ruler` runs one through ``simple_evaluate`` and returns its
per-prompt rows; :func:`harness_samples` turns those prompts into this project's samples, so the
project's runner can read the very same prompts (``docs/evaluation.md``, "Agreement with the harness").
The harness counts its lengths with the 128 tokens to generate included (a "4096" prompt has about 3,968
tokens); this project's lengths are the prompt's.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from .lm_eval_data import _write_jsonl, ruler_path

__all__ = ["HARNESS_OFFLINE_TASKS", "harness_samples", "run_harness_ruler",
           "write_ruler_data"]

#: the harness's RULER tasks that generate offline, and this project's haystack of the same kind
HARNESS_OFFLINE_TASKS = {"niah_single_1": "noise", "niah_multikey_2": "needles", "niah_multikey_3": "needles"}
#: the tokens the harness's needle tasks generate, which its lengths include
HARNESS_NEW_TOKENS = 128


def _offline_task(task: str) -> None:
    if task not in HARNESS_OFFLINE_TASKS:
        raise ValueError(f"the harness's RULER task {task!r} downloads its haystack or data; the ones that run "
                         f"offline are {', '.join(HARNESS_OFFLINE_TASKS)}")


def _ruler_generators():
    try:
        return importlib.import_module("lm_eval.tasks.ruler.niah_utils")
    except ImportError as err:
        raise ImportError(f"the harness's RULER tasks need their extra packages: pip install 'lm_eval[ruler]' "
                          f"(wonderwords, nltk) ({err})") from err


def harness_samples(rows: Sequence[dict], task: str, tokenizer, length: int) -> list:
    """The prompts of a harness run (:func:`run_harness_ruler`'s rows: what the model was given) as this
    project's samples, for :func:`hf_trajpe.evaluation.ruler.run_ruler` (``prompts=``): the same prompts read
    by the project's runner. (The harness draws its needles from Python's global random state, seeded by
    ``simple_evaluate``: its prompts are taken from its run, not made again.)"""
    from ..evaluation.ruler.fitting import encode
    from ..evaluation.ruler.task import Sample

    _offline_task(task)
    return [Sample(task, f"harness_{HARNESS_OFFLINE_TASKS[task]}", length, row["index"], row["prompt"],
                   list(row["answers"]), len(encode(tokenizer, row["prompt"])), HARNESS_NEW_TOKENS,
                   "string_match_all") for row in rows]


def run_harness_ruler(model, tokenizer, tokenizer_dir: str | os.PathLike, task: str, length: int,
                      limit: int | None = None, max_length: int | None = None, lm=None,
                      add_bos_token: bool | None = None) -> list[dict]:
    """Run the harness's own ``task`` at ``length`` (its first ``limit`` prompts) on ``model`` through
    ``simple_evaluate``: its generator, its request, its greedy generation and its scoring. Returns one row
    per prompt: ``index``, ``prompt`` (what the model was given), ``prediction`` and ``score``.
    ``max_length``: the harness's context limit, which it keeps ``max_gen_toks`` of free and cuts the prompt
    from the left to fit (default: ``length + 128``, room for the whole prompt: ``length - 128`` tokens and
    the answer prefix). ``add_bos_token``: the harness's switch for the tokenizer's special tokens (None: the
    tokenizer's default; SmolLM2's adds none, the byte tokenizer appends an eos: give ``False`` there to read
    the prompt as this project's runner does)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from .lm_eval import harness_lm

    _offline_task(task)
    generators = _ruler_generators()
    if not Path(tokenizer_dir).is_dir():
        raise FileNotFoundError(f"{tokenizer_dir} is not a folder; save the tokenizer there first "
                                "(tokenizer.save_pretrained(folder)): the harness loads it by path")
    folder = Path(generators.__file__).parent
    manager = TaskManager(include_path=str(folder), include_defaults=False,  # (the metadata goes to the generator)
                          metadata={"max_seq_lengths": [length], "tokenizer": str(tokenizer_dir)})
    lm = lm if lm is not None else harness_lm(model, tokenizer, max_length=max_length or length + HARNESS_NEW_TOKENS,
                                              add_bos_token=add_bos_token)
    out = simple_evaluate(model=lm, tasks=[task], task_manager=manager, limit=limit, log_samples=True,
                          bootstrap_iters=0)
    rows = []
    for sample in out["samples"][task]:
        context = sample["arguments"][0][0] if isinstance(sample["arguments"][0], (list, tuple)) else \
            sample["arguments"]["gen_args_0"]["arg_0"]
        rows.append({"index": int(sample["doc"]["index"]), "prompt": context,
                     "prediction": sample["resps"][0][0], "answers": list(sample["doc"]["outputs"]),
                     "score": float(sample[str(length)])})
    return rows


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
