"""Run RULER's tasks on a model: prompts made once, greedy generation one prompt at a time, RULER's scores.

:func:`run_ruler` is the Python entry point; it returns a :class:`RulerTable` of one row per prompt, which
:mod:`.summary` turns into cells with intervals, paired comparisons and effective lengths, and
:mod:`.report` into JSON, Markdown and a PNG. Generation follows RULER's HF backend: greedy
(``do_sample=False``), batch 1, ``max_new_tokens`` = the task's ``tokens_to_generate``, stopping early at the
end-of-sequence token, and as soon as the answer so far already scores full marks: RULER's scores only ask
whether the references occur in the cleaned prediction, so more text could not change the score (exactly the
score of the full budget, for fewer decoding steps; each row records the tokens it generated).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from .fitting import encode
from .haystacks import get_haystack
from .scoring import postprocess_pred, sample_score
from .task import Sample, get_task, task_names

__all__ = ["QUICK", "RulerTable", "generate_answer", "generate_answer_counted", "make_samples", "prompt_key",
           "run_ruler"]

#: a small run: one task of each kind, the noise haystack, two samples
QUICK = {"tasks": ["niah_single_1", "niah_multikey_1", "vt", "cwe", "fwe"], "haystacks": ["noise"], "samples": 2}


@dataclass
class RulerTable:
    """One row per (method, task, haystack, length, sample): the score, prediction, answers and timings."""

    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def extend(self, other: RulerTable) -> RulerTable:
        self.rows += other.rows
        self.meta.setdefault("methods", [])
        self.meta["methods"] += [m for m in other.meta.get("methods", []) if m not in self.meta["methods"]]
        for key, value in other.meta.items():
            self.meta.setdefault(key, value)
        return self

    def to_dict(self) -> dict:
        return {"meta": self.meta, "rows": self.rows}


def _plan(tasks: Sequence[str] | None, haystacks: Sequence[str] | None) -> list[tuple[str, str | None]]:
    """(task, haystack) pairs: each task on each haystack (default: its own RULER haystack); tasks that are
    their own haystack once, with ``None``."""
    plan = []
    for name in tasks or task_names():
        task = get_task(name)
        if not task.uses_haystack:
            plan.append((name, None))
            continue
        for hay in haystacks or [task.default_haystack]:
            get_haystack(hay)  # an unknown name fails before any prompt is made
            plan.append((name, hay))
    return plan


def make_samples(tokenizer, tasks: Sequence[str] | None = None, lengths: Sequence[int] = (4096,), samples: int = 5,
                 haystacks: Sequence[str] | None = None, seed: int = 0) -> list[Sample]:
    """Every prompt of a run, in the order they are run: task, haystack, length, sample index."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    if not lengths:
        raise ValueError("give at least one length")
    out = []
    for name, hay in _plan(tasks, haystacks):
        task = get_task(name)
        for length in lengths:
            for index in range(samples):
                out.append(task.sample(tokenizer, int(length), get_haystack(hay) if hay else None, index, seed))
    return out


def prompt_key(method: str, sample: Sample | dict) -> str:
    """What identifies one row of a run: the method and the prompt itself (a hash of its text, so a row made
    with another tokenizer, seed or generator is never taken for this prompt's)."""
    get = sample.get if isinstance(sample, dict) else lambda k: getattr(sample, k, None)
    digest = get("prompt_sha1") or hashlib.sha1(get("prompt").encode()).hexdigest()
    return f"{method}|{get('task')}|{get('haystack')}|{get('length')}|{get('index')}|{digest}"


def generate_answer(model, tokenizer, prompt: str, max_new_tokens: int, metric: str | None = None,
                    answers: Sequence[str] | None = None) -> str:
    """Greedy continuation of ``prompt`` (no special tokens added, as its length was counted); with ``metric`` and
    ``answers``, stopped as soon as the continuation scores full marks (module docstring)."""
    return generate_answer_counted(model, tokenizer, prompt, max_new_tokens, metric, answers)[0]


def generate_answer_counted(model, tokenizer, prompt: str, max_new_tokens: int, metric: str | None = None,
                            answers: Sequence[str] | None = None) -> tuple[str, int]:
    """:func:`generate_answer` and the number of tokens it generated."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    device = next(model.parameters()).device
    ids = torch.tensor([encode(tokenizer, prompt)], dtype=torch.long, device=device)
    start = ids.shape[1]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    class Answered(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
            text = tokenizer.decode(input_ids[0, start:], skip_special_tokens=True)
            done = sample_score(metric, text, answers) >= 1.0
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    stopping = StoppingCriteriaList([Answered()]) if metric is not None and answers else None
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad, stopping_criteria=stopping)
    return tokenizer.decode(out[0, start:], skip_special_tokens=True), int(out.shape[1] - start)


def run_ruler(model, tokenizer, tasks: Sequence[str] | None = None, lengths: Sequence[int] = (4096,),
              samples: int = 5, haystacks: Sequence[str] | None = None, seed: int = 0, method: str = "model",
              prompts: Sequence[Sample] | None = None, progress: bool = True, done: dict[str, dict] | None = None,
              on_row: Callable[[dict], None] | None = None) -> RulerTable:
    """Score ``model`` on RULER's tasks at each length, ``samples`` prompts per task, haystack and length.

    ``tasks``: registered task names (default: all); ``haystacks``: haystack names (default: each task's own);
    ``prompts``: samples from :func:`make_samples` to reuse (then tasks, lengths, samples, haystacks and seed
    are not used), so that several methods read the very same prompts. ``method`` labels the rows.
    ``done``: rows of an earlier, interrupted run by :func:`prompt_key`, taken as they are instead of
    generating again; ``on_row``: called with each new row as soon as it is scored (to save it)."""
    from tqdm.auto import tqdm

    if prompts is None:
        prompts = make_samples(tokenizer, tasks, lengths, samples, haystacks, seed)
    if model is None and not all(done and prompt_key(method, s) in done for s in prompts):
        raise ValueError("run_ruler needs a model unless every prompt's row is in done")
    was_training = model.training if model is not None else False
    if model is not None:
        model.eval()
    table = RulerTable(meta={"methods": [method], "seed": seed, "lengths": sorted({s.length for s in prompts}),
                             "tasks": list(dict.fromkeys(s.task for s in prompts)),
                             "haystacks": list(dict.fromkeys(s.haystack for s in prompts))})
    bar = tqdm(prompts, desc=f"RULER {method}", unit="prompt", disable=not progress, file=sys.stderr)
    try:
        for s in bar:
            bar.set_postfix_str(f"{s.task} {s.haystack} {s.length}", refresh=False)
            key = prompt_key(method, s)
            if done and key in done:
                table.rows.append(done[key])
                continue
            wall, cpu = time.perf_counter(), time.process_time()
            raw, generated = generate_answer_counted(model, tokenizer, s.prompt, s.max_new_tokens, s.metric,
                                                     s.answers)
            row = {k: v for k, v in asdict(s).items() if k != "prompt"}
            row.update(prompt_sha1=hashlib.sha1(s.prompt.encode()).hexdigest(), method=method,
                       prediction=postprocess_pred(raw), score=sample_score(s.metric, raw, s.answers),
                       generated_tokens=generated, wall_seconds=time.perf_counter() - wall,
                       cpu_seconds=time.process_time() - cpu)
            table.rows.append(row)
            if on_row is not None:
                on_row(row)
    finally:
        bar.close()
        if model is not None:
            model.train(was_training)
    return table
