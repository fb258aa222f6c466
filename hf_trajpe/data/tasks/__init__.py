"""Tasks with known answers (docs/tasks.md): flip-flop, selective copy, counting, passkey retrieval.

Each is registered by name in :data:`TASK_REGISTRY` (one module each) and built with
:func:`build_task` as a ``datasets.DatasetDict`` whose rows carry ``text`` and the character spans of
the answers (``answer_spans``), scored by exact match on the answer tokens
(:mod:`hf_trajpe.evaluation.answers`).

    >>> from hf_trajpe.data.tasks import build_task
    >>> dd = build_task("flip_flop", train=100, validation=10, test=20, seed=0)
    >>> list(dd)
    ['test', 'test_ood_sparse', 'test_ood_dense', 'validation', 'train']
"""

from . import flip_flop, selective_copy, counting, passkey  # noqa: F401, I001  (registers them, in this order)
from .build import DEFAULT_TASK_SIZES, build_task, encode_answers, encode_rows
from .registry import TASK_REGISTRY, Task, get_task, register_task, task_names

__all__ = ["DEFAULT_TASK_SIZES", "TASK_REGISTRY", "Task", "build_task", "encode_answers", "encode_rows",
           "get_task", "register_task", "task_names"]
