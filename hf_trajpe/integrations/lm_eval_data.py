"""The data of the local lm-evaluation-harness tasks, written as JSONL by the project (no download).

Standard library only (the generators of ``hf_trajpe.data`` are pure Python), so the task loaders the
harness calls and ``hf-trajpe lm-eval`` stay light. Layout of a data folder::

    manifest.json                       the options the files were written with
    ppl/<content type>.jsonl            {"text", "source"}: the test documents of each content type
    answers/<task>/<split>.jsonl        {"prompt", "answer", "length", "source"}: known-answer tasks
    ruler/<task>.jsonl                  {"prompt", "answers", "target", ...}: RULER prompts (lm_eval_ruler.py)

The perplexity documents are the test split ``hf-trajpe eval --n-test N --data-seed S`` scores (the same
generator call), and the answer rows the test splits of ``hf_trajpe.data.tasks.build_task(name, test=N,
seed=S)``: the prompt is the row's text up to its last answer span (trailing spaces dropped, so a
sub-word tokenizer sees ``... The pass key is`` and generates `` 52817``), the answer is that span.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["ANSWERS_TAG", "ANSWER_TASKS", "DATA_DIR_KEY", "PASSKEY_TAG", "PPL_TAG", "RULER_TAG", "answer_path",
           "expand_tasks", "ruler_path", "ruler_task",
           "perplexity_path", "perplexity_task", "read_jsonl", "write_task_data"]

#: the known-answer tasks: each test split and the name of its shipped harness task (lm_eval_tasks/<name>.yaml)
ANSWER_TASKS: dict[str, dict[str, str]] = {
    "selective_copy": {"test": "hf_trajpe_selective_copy", "test_ood_sparse": "hf_trajpe_selective_copy_ood_sparse",
                       "test_ood_dense": "hf_trajpe_selective_copy_ood_dense"},
    "counting": {"test": "hf_trajpe_counting", "test_ood": "hf_trajpe_counting_ood",
                 "test_ood_value": "hf_trajpe_counting_ood_value"},
    "flip_flop": {"test": "hf_trajpe_flip_flop", "test_ood_sparse": "hf_trajpe_flip_flop_ood_sparse",
                  "test_ood_dense": "hf_trajpe_flip_flop_ood_dense"},
    "passkey": {"test": "hf_trajpe_passkey_1x", "test_2x": "hf_trajpe_passkey_2x", "test_4x": "hf_trajpe_passkey_4x"},
}
#: the harness tags of the shipped tasks
PPL_TAG, ANSWERS_TAG, PASSKEY_TAG = "hf_trajpe_ppl", "hf_trajpe_answers", "hf_trajpe_passkey"
#: the tag of the RULER tasks, whose prompts ``hf_trajpe.integrations.lm_eval_ruler.write_ruler_data`` writes
RULER_TAG = "hf_trajpe_ruler"
#: the harness metadata key (``--metadata '{"data_dir": ...}'``) the task loaders read the folder from
DATA_DIR_KEY = "data_dir"


def perplexity_path(data_dir: str | os.PathLike, content_type: str) -> Path:
    return Path(data_dir) / "ppl" / f"{content_type}.jsonl"


def answer_path(data_dir: str | os.PathLike, task: str, split: str) -> Path:
    return Path(data_dir) / "answers" / task / f"{split}.jsonl"


def ruler_path(data_dir: str | os.PathLike, task: str) -> Path:
    return Path(data_dir) / "ruler" / f"{task}.jsonl"


def ruler_task(task: str) -> str:
    return f"{RULER_TAG}_{task}"


def perplexity_task(content_type: str) -> str:
    return f"{PPL_TAG}_{content_type}"


def expand_tasks(tasks: Sequence[str], data_dir: str | os.PathLike) -> list[str]:
    """``tasks`` with the tags replaced by the tasks whose data ``data_dir`` holds (its manifest), so a
    folder written for a few content types or tasks runs with the tags; other names are kept. A tag with none
    of its tasks there, or a task whose data the folder lacks, is a ``ValueError`` that says what the folder
    holds (the harness would only say that it found no tasks)."""
    manifest = json.loads((Path(data_dir) / "manifest.json").read_text())
    by_tag = {PPL_TAG: [perplexity_task(t) for t in manifest["content_types"]],
              ANSWERS_TAG: [n for t in manifest["tasks"] if t != "passkey" for n in ANSWER_TASKS[t].values()],
              PASSKEY_TAG: list(ANSWER_TASKS["passkey"].values()) if "passkey" in manifest["tasks"] else [],
              RULER_TAG: [ruler_task(t) for t in manifest.get("ruler", {}).get("tasks", [])]}
    held = {task for names in by_tag.values() for task in names}
    data_backed = {n for names in ANSWER_TASKS.values() for n in names.values()}
    missing = [name for name in tasks if (name in by_tag and not by_tag[name])
               or (name not in by_tag and (name.startswith(f"{PPL_TAG}_") or name in data_backed)
                   and name not in held)]
    if missing:
        raise ValueError(
            f"the task data in {os.fspath(data_dir)} holds nothing for {', '.join(missing)}: it was written for "
            f"content types {', '.join(manifest['content_types']) or '(none)'} and tasks "
            f"{', '.join(manifest['tasks']) or '(none)'} (its manifest.json); write the data these tasks need with "
            "write_task_data(DIR, content_types=..., tasks=...), or ask for tasks it holds")
    out: list[str] = []
    for name in tasks:
        for task in by_tag.get(name, [name]):
            if task not in out:
                out.append(task)
    return out


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path: Path, rows: Sequence[Mapping]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)  # a reader never sees half a file


def answer_row(text: str, spans: Sequence[Sequence[int]], source: str) -> dict:
    """A prompt/answer pair from a task row: the text before the last answer span, and that span."""
    start, end = max((int(s), int(e)) for s, e in spans)
    return {"prompt": text[:start].rstrip(), "answer": text[start:end], "length": len(text), "source": source}


def write_task_data(out_dir: str | os.PathLike, content_types: Sequence[str] | None = None, n_docs: int = 8,
                    min_chars: int | None = None, tasks: Sequence[str] | None = None, n_task: int = 20,
                    passkey_length: int = 256, task_options: Mapping[str, Mapping] | None = None,
                    seed: int = 0) -> Path:
    """Write the data of every local task into ``out_dir`` (created); returns it.

    ``content_types``: default the seven of the study; ``n_docs`` test documents each of at least
    ``min_chars`` characters (default: the project's). ``tasks``: default all of :data:`ANSWER_TASKS`,
    ``n_task`` rows per test split; ``passkey_length``: the passkey's 1x length in characters (the 2x and
    4x splits are twice and four times that); ``task_options``: other options per task (see
    ``hf_trajpe.data.tasks``). Deterministic given the arguments.
    """
    from ..data import DEFAULT_MIN_CHARS
    from ..data.registry import get, names
    from ..data.tasks import get_task

    if n_docs < 1 or n_task < 1:
        raise ValueError(f"n_docs and n_task must be at least 1, got {n_docs} and {n_task}")
    content_types = list(content_types or names())
    tasks = list(tasks or ANSWER_TASKS)
    unknown = sorted(set(tasks) - set(ANSWER_TASKS))
    if unknown:
        raise ValueError(f"no local harness task for {unknown}; choose from {sorted(ANSWER_TASKS)}")
    min_chars = min_chars or DEFAULT_MIN_CHARS
    options = {name: dict((task_options or {}).get(name, {})) for name in tasks}
    if "passkey" in options:
        options["passkey"].setdefault("length", passkey_length)
    out = Path(out_dir)
    for ctype in content_types:
        rows = get(ctype).make_splits({"test": n_docs, "validation": 0, "train": 0}, seed, min_chars, None)["test"]
        _write_jsonl(perplexity_path(out, ctype), rows)
    for name in tasks:
        task = get_task(name)
        splits = task.make_splits({"test": n_task, "validation": 0, "train": 0}, seed,
                                  **task.check_options(options[name]))
        for split in ANSWER_TASKS[name]:
            _write_jsonl(answer_path(out, name, split),
                         [answer_row(r["text"], r["answer_spans"], r["source"]) for r in splits[split]])
    manifest = {"content_types": content_types, "n_docs": n_docs, "min_chars": min_chars, "tasks": tasks,
                "n_task": n_task, "task_options": options, "seed": seed}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out
