"""The plug-in side of the study engine (:mod:`.engine`): what a kind of study (content types, tasks with
known answers, context extension, recovery after a swap, the next ones) implements, and the engine's view of its
pieces. The engine owns the order (data, runs, parallel training with resume, evaluation, run records, report);
a suite owns what is particular to it. Each suite lives in its folder under :mod:`hf_trajpe.study.suites`,
registered by name in :mod:`.registry` (the ``suite:`` key of a study YAML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .runs import Run
from .train import train_run

__all__ = ["Part", "Prepared", "Suite"]


@dataclass(frozen=True)
class Part:
    """Runs that train on the same rows: the content study has one part, the task study one per task."""

    name: str  # the key of the part's results and timing
    record: dict = field(default_factory=dict)  # fields put first in its run summaries and session records
    prefix: str = ""  # before each of its training log lines
    cfg: Any = None  # the config its runs train with, where the part sizes its own (None: the study's)


@dataclass
class Prepared:
    """A part's data, built once and reused when the study runs again."""

    #: the training rows (:mod:`.rows`): ids and, where the suite trains on some tokens only, the loss mask (None:
    #: the suite's ``train_fn`` builds its runs' data itself)
    rows: Path | None
    length: int  # tokens per training row
    extra: dict[str, Any] = field(default_factory=dict)  # what the suite's evaluation needs besides


class Suite(Protocol):
    """A kind of study. ``config`` is its YAML's dataclass, a :class:`~.base_config.BaseStudyConfig` (``load``,
    ``validate``, ``fingerprint``, ``to_dict``, ``covered_by``, ``output_dir``, ``workers``, ``seeds``).
    ``train_fn`` trains one run in a worker process (picklable, with the arguments of
    :func:`~.train.train_run`, the default: a small model through :mod:`hf_trajpe.training`'s ``Trainer``)."""

    name: str
    config: type
    train_fn = staticmethod(train_run)

    def parts(self, cfg, log) -> list[Part]:
        """The parts in the order they run (and anything the study skips, said on ``log``)."""

    def prepare(self, cfg, part: Part, out: Path, log) -> Prepared:
        """Build (or reload) the part's data and save its training rows with their loss mask."""

    def plan(self, cfg, part: Part, out: Path) -> list[Run]:
        """The runs of the part, each in its folder under ``out/models``."""

    def experiment(self, cfg, part: Part, prepared: Prepared, run: Run) -> dict:
        """The run's experiment config (:mod:`hf_trajpe.training`) as a dict, working in ``<folder>.tmp``."""

    def evaluate(self, cfg, part: Part, prepared: Prepared, runs: list[Run], progress: bool, log) -> dict:
        """The part's results, handed to :meth:`report` under ``part.name``."""

    def report(self, cfg, results: dict, summaries: list[dict], timing: dict, versions: dict,
               command: str | None) -> dict[str, Path]:
        """Write the report section of the study; returns the files, ``study_md`` among them.
        ``timing``: ``{"parts": {name: {data_seconds, train_wall_seconds, new_models, eval_wall_seconds}},
        "total_wall_seconds": s}``."""

    def first_screen(self, paths: dict[str, Path]) -> str:
        """The lines ``hf-trajpe study`` prints last: the study's result at a glance."""
