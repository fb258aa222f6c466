"""Loaders and scoring of hf_trajpe's local lm-evaluation-harness tasks (the YAMLs beside this file).

The harness imports this file by path (``!function utils.<name>``) and calls a loader with the task's
``metadata`` and ``dataset_kwargs``; the data folder comes from the metadata key ``data_dir`` (written by
``hf_trajpe.integrations.lm_eval_data.write_task_data`` or ``hf-trajpe lm-eval``). Nothing is downloaded.
"""

from __future__ import annotations

from hf_trajpe.integrations.lm_eval_data import (
    DATA_DIR_KEY,
    answer_path,
    perplexity_path,
    read_jsonl,
    ruler_path,
)


def _data_dir(kwargs: dict) -> str:
    data_dir = kwargs.get(DATA_DIR_KEY)
    if not data_dir:
        raise ValueError("hf_trajpe's local tasks need their data folder: write it with `hf-trajpe lm-eval "
                         "--write-data DIR` (or hf_trajpe.integrations.lm_eval_data.write_task_data) and pass "
                         "--metadata '{\"data_dir\": \"DIR\"}' (TaskManager(metadata={\"data_dir\": DIR}))")
    return str(data_dir)


def _dataset(path, what: str) -> dict:
    import datasets

    if not path.is_file():
        raise FileNotFoundError(f"no {what} data at {path}; write the folder with `hf-trajpe lm-eval --write-data "
                                f"{path.parents[1] if what == 'perplexity' else path.parents[2]}`")
    return {"test": datasets.Dataset.from_list(read_jsonl(path))}


def perplexity_docs(content_type: str, **kwargs) -> dict:
    """The test documents of one content type (``ppl/<type>.jsonl``)."""
    return _dataset(perplexity_path(_data_dir(kwargs), content_type), "perplexity")


def answer_docs(task: str, split: str, **kwargs) -> dict:
    """The prompt/answer rows of one known-answer task's test split (``answers/<task>/<split>.jsonl``)."""
    return _dataset(answer_path(_data_dir(kwargs), task, split), f"{task}/{split}")


def is_match(generated: str, answer: str) -> bool:
    """Whether the greedy continuation begins with the answer (leading whitespace dropped), and a numeric
    answer is not the start of a longer number (``1`` does not match ``10``).

    The first characters decide, as in hf_trajpe's answer accuracy (every answer token the argmax): a
    model that goes on writing after the answer (the next flip-flop instruction) is not penalised.
    """
    text = generated.lstrip()
    if not text.startswith(answer):
        return False
    after = text[len(answer):len(answer) + 1]
    return not (answer[-1:].isdigit() and after.isdigit())


def process_answer(doc: dict, results: list[str]) -> dict[str, int]:
    return {"exact_match": int(is_match(results[0], doc["answer"]))}


def ruler_docs(task: str, **kwargs) -> dict:
    """The RULER prompts of one task (``ruler/<task>.jsonl``, written by ``write_ruler_data``)."""
    path = ruler_path(_data_dir(kwargs), task)
    if not path.is_file():
        raise FileNotFoundError(f"no RULER prompts at {path}; write them with hf_trajpe.integrations.lm_eval_ruler."
                                f"write_ruler_data({path.parents[1]!s}, tokenizer, tasks=[{task!r}])")
    return _dataset(path, f"ruler/{task}")


def process_ruler(doc: dict, results: list[str]) -> dict[str, float]:
    """RULER's score of the generation (``string_match_all`` after RULER's cleaning)."""
    from hf_trajpe.evaluation.ruler.scoring import sample_score

    return {"string_match_all": sample_score(doc["metric"], results[0], doc["answers"])}
