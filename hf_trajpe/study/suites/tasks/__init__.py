"""The task study (``suite: tasks``, configs/study/tasks.yaml): tasks with known answers (docs/tasks.md), exact
match and answer-token accuracy in and out of distribution, per task, encoding and seed."""

from .config import TaskStudyConfig
from .suite import TaskSuite

__all__ = ["TaskStudyConfig", "TaskSuite"]
