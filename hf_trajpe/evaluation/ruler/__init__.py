"""RULER's synthetic long-context tasks (Hsieh et al., COLM 2024), generated offline with the model's own
tokenizer to an exact token length, on haystacks of every content type. See docs/evaluation.md, "RULER".

    >>> from hf_trajpe.evaluation.ruler import run_ruler
    >>> table = run_ruler(model, tokenizer, tasks=["niah_single_1", "vt"], lengths=[4096], samples=5,
    ...                   haystacks=["noise", "code_hierarchy"], seed=0)
"""

# register the tasks, in RULER's order
from . import niah, variable_tracking  # noqa: F401, I001
from . import common_words, frequent_words  # noqa: F401, I001
from .haystacks import HAYSTACK_REGISTRY, Haystack, get_haystack, haystack_names, register_haystack
from .report import write_ruler_report
from .runner import RulerTable, make_samples, run_ruler
from .scoring import postprocess_pred, string_match_all, string_match_part
from .summary import summarize
from .task import RULER_TASKS, RulerTask, Sample, get_task, register_ruler_task, task_names

__all__ = ["HAYSTACK_REGISTRY", "RULER_TASKS", "Haystack", "RulerTable", "RulerTask", "Sample", "get_haystack",
           "get_task", "haystack_names", "make_samples", "postprocess_pred", "register_haystack", "register_ruler_task",
           "run_ruler", "string_match_all", "string_match_part", "summarize", "task_names", "write_ruler_report"]
