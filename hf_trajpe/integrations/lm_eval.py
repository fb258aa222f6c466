"""Evaluate a patched model with EleutherAI's lm-evaluation-harness, offline, on hf_trajpe's local tasks.

    >>> import hf_trajpe
    >>> from hf_trajpe.integrations import lm_eval as he
    >>> hf_trajpe.patch(model, "trajectory", base="rope", strength=0.2)
    >>> data = he.write_task_data("outputs/lm_eval_data", n_docs=4)
    >>> results = he.evaluate(model, tokenizer, ["hf_trajpe_ppl", "hf_trajpe_passkey"], data)
    >>> print(he.table(results))

The model object goes to the harness's own ``HFLM`` class (``pretrained=`` a model, not a name), so every
request type of the harness (loglikelihood, rolling loglikelihood, greedy generation) runs through the
patched forward and ``generate`` unchanged; no model class is registered, because the harness's command
line has no plugin entry point that would import one (``hf-trajpe lm-eval`` is the command line). The
tasks are the YAMLs of ``lm_eval_tasks/`` beside this module (:data:`TASKS_DIR`), loaded with
``TaskManager(include_path=TASKS_DIR, include_defaults=False)``: the harness's hub tasks are never indexed.
Needs ``pip install "hf_trajpe[lm-eval]"``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .lm_eval_data import (
    ANSWER_TASKS,
    ANSWERS_TAG,
    DATA_DIR_KEY,
    PASSKEY_TAG,
    PPL_TAG,
    RULER_TAG,
    expand_tasks,
    write_task_data,
)

__all__ = ["ANSWER_TASKS", "TASKS_DIR", "evaluate", "harness_lm", "require_lm_eval", "table", "task_manager",
           "task_names", "write_task_data"]

#: the shipped task YAMLs (package data)
TASKS_DIR = Path(__file__).with_name("lm_eval_tasks")


def require_lm_eval():
    """The ``lm_eval`` module, or an ImportError that says how to install it."""
    try:
        import lm_eval
    except ImportError as err:
        raise ImportError("lm-evaluation-harness is not installed; install it with "
                          "`pip install -e \".[lm-eval]\"` (lm-eval==0.4.13, no new torch)") from err
    return lm_eval


def task_names() -> list[str]:
    """The local task names and tags (``hf_trajpe_ppl``, ``hf_trajpe_answers``, ``hf_trajpe_passkey``,
    ``hf_trajpe_ruler``)."""
    return [PPL_TAG, ANSWERS_TAG, PASSKEY_TAG, RULER_TAG, *sorted(p.stem for p in TASKS_DIR.glob("*.yaml"))]


def task_manager(data_dir: str | os.PathLike):
    """A ``TaskManager`` over the local tasks only, reading their data from ``data_dir``."""
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    if not (Path(data_dir) / "manifest.json").is_file():
        raise FileNotFoundError(f"{data_dir} holds no task data (no manifest.json); write it with "
                                "write_task_data(DIR) or `hf-trajpe lm-eval --write-data DIR`")
    return TaskManager(include_path=str(TASKS_DIR), include_defaults=False,
                       metadata={DATA_DIR_KEY: str(Path(data_dir).resolve())})


def harness_lm(model, tokenizer, batch_size: int = 1, max_length: int | None = None, device: str | None = None,
               add_bos_token: bool | None = None):
    """The harness's ``HFLM`` around an in-memory (patched) model and its tokenizer.

    ``max_length``: the harness's window (rolling perplexity) and context limit; default the harness's
    choice from the model config (``max_position_embeddings``, else 2048), which a swapped encoding may
    not respect: give it explicitly for ALiBi, none or an extended context. ``add_bos_token``: the
    harness's switch for the tokenizer's special tokens (None: the tokenizer's default, which for the
    byte tokenizer appends an eos that the rolling perplexity then scores, docs/lm_eval.md). The
    tokenizer gets a pad token (its eos) if it has none, as the harness pads batches.
    """
    require_lm_eval()
    from lm_eval.models.huggingface import HFLM

    if tokenizer is None:
        raise ValueError("give the model's tokenizer: the harness cannot fetch it (no hub access)")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = device or str(next(model.parameters()).device)
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length,
                device=device, backend="causal", add_bos_token=add_bos_token)


def evaluate(model, tokenizer, tasks: Sequence[str], data_dir: str | os.PathLike, batch_size: int = 1,
             max_length: int | None = None, limit: int | None = None, log_samples: bool = False,
             lm=None, add_bos_token: bool | None = None) -> dict:
    """Run the harness's ``simple_evaluate`` on ``tasks`` (names or tags of :func:`task_names`; a tag
    runs the tasks whose data ``data_dir`` holds).

    ``lm``: an ``HFLM`` built already (then ``model``, ``tokenizer``, ``batch_size`` and ``max_length`` are
    not used). Returns the harness's result dict (``results[task][metric + ",none"]``).
    """
    require_lm_eval()
    from lm_eval import simple_evaluate

    unknown = [t for t in tasks if t not in task_names()]
    if unknown:
        raise ValueError(f"unknown local task(s) {unknown}; choose from {', '.join(task_names())}")
    manager = task_manager(data_dir)
    expanded = expand_tasks(tasks, data_dir)  # (refuses tasks the folder holds no data for, naming what it holds)
    lm = lm if lm is not None else harness_lm(model, tokenizer, batch_size=batch_size, max_length=max_length,
                                              add_bos_token=add_bos_token)
    return simple_evaluate(model=lm, tasks=expanded, task_manager=manager, limit=limit,
                           log_samples=log_samples, bootstrap_iters=0)


def table(results: dict) -> str:
    """A Markdown table of ``results`` with the columns of the harness's own (``lm_eval.utils.make_table``).

    Written here, not taken from the harness: its table goes through pytablewriter, which under this
    project's pins (python-dateutil 4) resolves to pytablewriter 0.38, whose headers come out as A, B, C
    and which fails on a value of 1e200 or more (an untrained model's perplexity).
    """
    rows = [["Tasks", "Version", "Filter", "n-shot", "Metric", "", "Value", "", "Stderr"]]
    higher = results.get("higher_is_better", {})
    for task in sorted(results["results"]):
        metrics = results["results"][task]
        name, version = metrics.get("alias", task), str(results.get("versions", {}).get(task, "N/A"))
        shots = str(results.get("n-shot", {}).get(task, 0))
        for key in sorted(k for k in metrics if "," in k and "_stderr," not in k):
            metric, _, filt = key.partition(",")
            value, err = metrics[key], metrics.get(f"{metric}_stderr,{filt}", "")
            arrow = {True: "↑", False: "↓"}.get(higher.get(task, {}).get(metric), "")
            rows.append([name, version, filt, shots, metric, arrow, _number(value), "±" if err != "" else "",
                         _number(err)])
            name = version = ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["|" + "|".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + "|" for r in rows]
    lines.insert(1, "|" + "|".join("-" * max(w, 1) for w in widths) + "|")
    return "\n".join(lines)


def _number(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) and abs(value) >= 1e6 else (
        f"{value:.4f}" if isinstance(value, float) else str(value))
