"""The task study's YAML (``configs/study/tasks.yaml``): a study config with a ``tasks:`` section, read by
:func:`~hf_trajpe.study.config.load_study_config` like the content study's and checked before anything
trains, with the same parser, the same ``model``/``encodings``/``train`` sections and the same
experiment config per run (:func:`~hf_trajpe.study.config.experiment_config`, with a task's data section).

``optional_encodings`` names encodings that this install of hf_trajpe may not have yet (``cope``): an
entry whose encoding ``hf_trajpe.patch`` does not know is then skipped, with the reason in the report,
instead of failing the config. Any other unknown encoding fails as in the content study. A scheme's own
options (``npos_max``) are written flat, as ``hf_trajpe.patch`` takes them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..training.config import ConfigError, ExperimentConfig
from .config import StudyTrain, check_margin, check_training_sections, experiment_config, patch_options
from .task_train import LOSSES

__all__ = ["TaskData", "TaskEval", "TaskStudyConfig", "patch_config", "task_experiment"]


@dataclass
class TaskData:
    train: int = 2000  # training examples per task
    validation: int = 100  # validation examples per task (the trainer's logged evaluation)
    test: int = 200  # examples in every test split (in distribution and out of distribution)
    seed: int = 0
    loss: str = "answers"  # answers: loss on the answer tokens only; all: on every token


@dataclass
class TaskEval:
    n_resamples: int = 2000
    level: float = 0.95
    batch_size: int = 32


@dataclass
class TaskStudyConfig:
    name: str
    model: dict  # a transformers config: model_type and its fields
    encodings: dict  # name -> patch options ({"encoding": "native"} for the unpatched model)
    tasks: dict  # task name -> its options ({} for the defaults; see hf_trajpe.data.tasks)
    baseline: str
    optional_encodings: list[str] = field(default_factory=list)
    equivalence_margin: float = 2.0  # "no effect" only within ±margin accuracy points (two one-sided tests)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    output_dir: str = "runs/study/tasks"
    report_dir: str = "outputs/study_tasks"
    tokenizer: str = "byte"
    workers: int = 2
    data: TaskData = field(default_factory=TaskData)
    train: StudyTrain = field(default_factory=StudyTrain)
    eval: TaskEval = field(default_factory=TaskEval)
    quick: list[str] = field(default_factory=list)

    def unavailable(self) -> dict[str, str]:
        """Optional encodings this install cannot patch with: ``{name: why}``."""
        from ..patching.schemes import encoding_names

        known = encoding_names()
        return {name: f"encoding {opts.get('encoding')!r} is not in this install of hf_trajpe ({', '.join(known)})"
                for name, opts in self.encodings.items()
                if name in self.optional_encodings and isinstance(opts, dict) and opts.get("encoding") not in known}

    def available_encodings(self) -> dict[str, dict]:
        skip = self.unavailable()
        return {name: opts for name, opts in self.encodings.items() if name not in skip}

    def validate(self) -> TaskStudyConfig:
        from ..data.tasks import get_task

        if not self.tasks:
            raise ConfigError("tasks: at least one task is needed")
        for name, opts in self.tasks.items():
            try:
                get_task(name).check_options(opts or {})
            except ValueError as err:
                raise ConfigError(f"tasks.{name}: {err}") from None
        if not self.encodings:
            raise ConfigError("encodings: at least one encoding is needed")
        for name, opts in self.encodings.items():
            if not isinstance(opts, dict) or "encoding" not in opts:
                raise ConfigError(f"encodings.{name}: expected a mapping with an 'encoding' key, got {opts!r}")
        available = self.available_encodings()
        for name, opts in available.items():
            try:
                patch_config(opts)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"encodings.{name}: {err}") from None
        if self.baseline not in available:
            raise ConfigError(f"baseline {self.baseline!r} is not one of the available encodings {list(available)}")
        check_training_sections(self)
        check_margin(self.equivalence_margin)
        for key in ("train", "validation", "test"):
            if getattr(self.data, key) < 1:
                raise ConfigError(f"data.{key} must be >= 1, got {getattr(self.data, key)}")
        if self.data.loss not in LOSSES:
            raise ConfigError(f"data.loss: {self.data.loss!r} is not one of {LOSSES}")
        if self.eval.n_resamples < 1 or not 0 < self.eval.level < 1 or self.eval.batch_size < 1:
            raise ConfigError("eval: n_resamples >= 1, 0 < level < 1 and batch_size >= 1 are needed")
        task = next(iter(self.tasks))
        for name, opts in available.items():  # what the runs train with, checked like a recipe's config
            try:
                task_experiment(self, task, name, patch_options(opts), self.seeds[0], Path(self.output_dir) / name)
            except ConfigError as err:
                raise ConfigError(f"encodings.{name}: the experiment config its runs train with (hf_trajpe.training) "
                                  f"is invalid: {err}") from None
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """What decides the trained models: a resumed study reuses finished models only when this matches."""
        d = self.to_dict()
        keep = {k: d[k] for k in ("model", "tokenizer", "data", "train", "tasks")}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def patch_config(opts: dict):
    """The ``PatchConfig`` of flat patch options as ``hf_trajpe.patch`` takes them (``{encoding: cope,
    npos_max: 256}``: a scheme's own options beside the common ones, where this install has them)."""
    from ..patching import PatchConfig

    if hasattr(PatchConfig, "from_options"):
        return PatchConfig.from_options(**opts)
    return PatchConfig(**opts)


def task_experiment(cfg: TaskStudyConfig, task: str, name: str, options: dict | None, seed: int,
                    output_dir: str | Path, block_size: int = 1) -> ExperimentConfig:
    """The experiment config of one task run: the content study's (model, optimizer, schedule, train) with
    the task's data section, for the record: the rows themselves come from the task
    (:func:`~hf_trajpe.study.task_train.task_trainer`), ``block_size`` is their padded length."""
    data = {"path": None, "content_types": [], "train": cfg.data.train, "validation": cfg.data.validation,
            "test": cfg.data.test, "seed": cfg.data.seed, "block_size": block_size, "order": "random"}
    return experiment_config(cfg, f"{task}_{name}", options, seed, output_dir, data=data)
