"""The task study's YAML (``configs/study/tasks.yaml``, ``suite: tasks``), read by
:func:`~hf_trajpe.study.registry.load_study_config` like the content study's and checked before anything
trains, with the same parser, the same ``model``/``encodings``/``train`` sections and the same
experiment config per run (:func:`~hf_trajpe.study.config.experiment_config`, with a task's data section).

``optional_encodings`` names encodings that this install of hf_trajpe may not have yet (``cope``): an
entry whose encoding ``hf_trajpe.patch`` does not know is then skipped, with the reason in the report,
instead of failing the config. Any other unknown encoding fails as in the content study. A scheme's own
options (``npos_max``) are written flat, as ``hf_trajpe.patch`` takes them.

``per_task`` sizes each task on its own: ``{task: {encodings: [names], train: {steps: N, ...}, data: {...}}}``
trains only those encodings on that task (the baseline always among them) with those ``train`` and ``data``
fields replaced, so a study that must fit a time budget can give a hard task more steps, another loss, and a
cheap comparison fewer models.
``comparisons`` lists ``[model, reference]`` pairs compared besides the baseline (paired on the examples,
where both were trained on a task): trajectory against its own base encoding, CoPE against RoPE.

Every encoding of a task trains the same number of steps: a step count is a field of the task's ``train``
section, never of an encoding (an encoding entry holds patch options only; ``steps`` there is refused as an
unknown patch option). ``budget.candidates`` (top level, or ``per_task.<task>.budget``) lets the study choose
that number per task on the validation split: every encoding and seed is trained once per candidate step
count, and the count with the highest validation exact match (mean over the task's encodings and seeds;
ties: answer-token accuracy, then fewer steps) is the task's budget, the one whose models are scored on the
test splits. The test splits play no part in the choice.

``data.vary_with_seed`` (default true): each model seed trains on its own draw of the task's validation and
train examples (drawn from ``data.seed`` and the model seed), so the spread across seeds includes the
training data; the test splits are those of ``data.seed`` for every model (paired on the same examples).
False: one draw for every seed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ....training.config import ConfigError, ExperimentConfig
from ...base_config import TrainedStudyConfig, digest
from ...config import (
    check_comparisons,
    check_encoding_names,
    check_layers_on_model,
    check_margin,
    check_training_sections,
    experiment_config,
    patch_options,
    patch_value,
)
from ...plan import AnalysisPlan, check_correction

__all__ = ["LOSSES", "TaskBudget", "TaskData", "TaskEval", "TaskStudyConfig", "patch_config", "task_experiment"]

#: which tokens of a training row carry the loss: the answer tokens, or every token
LOSSES = ("answers", "all")


@dataclass
class TaskData:
    train: int = 2000  # training examples per task
    validation: int = 100  # validation examples per task (the trainer's logged evaluation)
    test: int = 200  # examples in every test split (in distribution and out of distribution)
    seed: int = 0
    loss: str = "answers"  # answers: loss on the answer tokens only; all: on every token
    vary_with_seed: bool = True  # each model seed its own validation and train examples (the test splits: data.seed's)


@dataclass
class TaskBudget:
    candidates: list[int] = field(default_factory=list)  # step counts to choose from on validation; []: train.steps


@dataclass
class TaskEval:
    n_resamples: int = 2000
    level: float = 0.95
    batch_size: int = 32


@dataclass(kw_only=True)
class TaskStudyConfig(TrainedStudyConfig):
    encodings: dict  # name -> patch options ({"encoding": "native"} for the unpatched model)
    tasks: dict  # task name -> its options ({} for the defaults; see hf_trajpe.data.tasks)
    baseline: str
    optional_encodings: list[str] = field(default_factory=list)
    equivalence_margin: float = 2.0  # "no effect" only within ±margin accuracy points (two one-sided tests)
    output_dir: str = "runs/study/tasks"
    report_dir: str = "outputs/study_tasks"
    data: TaskData = field(default_factory=TaskData)
    eval: TaskEval = field(default_factory=TaskEval)
    budget: TaskBudget = field(default_factory=TaskBudget)
    per_task: dict = field(default_factory=dict)  # task -> {encodings: [names], train, data, budget}
    comparisons: list[list[str]] = field(default_factory=list)  # [[model, reference], ...] besides the baseline
    correction: str = "holm"  # across the report's comparisons: holm or bh (the other is shown beside)
    analysis: AnalysisPlan = field(default_factory=AnalysisPlan)  # the family in words, changes after a look

    ORDER: ClassVar[tuple[str, ...]] = (
        "name", "model", "encodings", "tasks", "baseline", "optional_encodings", "equivalence_margin", "seeds",
        "output_dir", "report_dir", "tokenizer", "workers", "data", "train", "eval", "quick", "budget", "per_task",
        "comparisons", "correction", "analysis")

    def unavailable(self) -> dict[str, str]:
        """Optional encodings this install cannot patch with: ``{name: why}``."""
        from ....patching.schemes import encoding_names

        known = encoding_names()
        return {name: f"encoding {opts.get('encoding')!r} is not in this install of hf_trajpe ({', '.join(known)})"
                for name, opts in self.encodings.items()
                if name in self.optional_encodings and isinstance(opts, dict)
                and not set(_encodings_of(opts.get("encoding"))) <= set(known)}

    def available_encodings(self) -> dict[str, dict]:
        skip = self.unavailable()
        return {name: opts for name, opts in self.encodings.items() if name not in skip}

    def task_encodings(self, task: str) -> dict[str, dict]:
        """The available encodings trained on ``task`` (``per_task.<task>.encodings``, else all)."""
        available = self.available_encodings()
        names = (self.per_task.get(task) or {}).get("encodings")
        return available if names is None else {n: available[n] for n in names if n in available}

    def for_task(self, task: str) -> TaskStudyConfig:
        """This config with ``per_task.<task>.train``, ``.data`` and ``.budget`` applied: what ``task``'s runs
        train with."""
        plan = self.per_task.get(task) or {}
        train, data, budget = plan.get("train") or {}, plan.get("data") or {}, plan.get("budget") or {}
        if not train and not data and not budget:
            return self
        return dataclasses.replace(self, train=dataclasses.replace(self.train, **train),
                                   data=dataclasses.replace(self.data, **data),
                                   budget=dataclasses.replace(self.budget, **budget))

    def step_candidates(self, task: str) -> list[int]:
        """The step counts ``task``'s budget is chosen from on validation; ``[]``: ``train.steps``, no choice."""
        return sorted(self.for_task(task).budget.candidates)

    def task_comparisons(self, task: str) -> list[tuple[str, str]]:
        """The ``comparisons`` pairs whose two encodings were both trained on ``task``."""
        names = self.task_encodings(task)
        return [(a, b) for a, b in self.comparisons if a in names and b in names]

    def validate(self) -> TaskStudyConfig:
        from ....data.tasks import get_task

        if not self.tasks:
            raise ConfigError("tasks: at least one task is needed")
        for name, opts in self.tasks.items():
            try:
                get_task(name).check_options(opts or {})
            except ValueError as err:
                raise ConfigError(f"tasks.{name}: {err}") from None
        check_encoding_names(self.encodings)
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
        check_layers_on_model(self.model, available)
        self._check_per_task(available)
        check_margin(self.equivalence_margin)
        check_correction(self.correction)
        self.analysis.check()
        _check_data(self.data)
        _check_budget(self.budget)
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

    def _check_per_task(self, available: dict) -> None:
        if not isinstance(self.per_task, dict):
            raise ConfigError(f"per_task: expected a mapping of task -> {{encodings, train, data}}, got "
                              f"{self.per_task!r}")
        for task, plan in self.per_task.items():
            where = f"per_task.{task}"
            if task not in self.tasks:
                raise ConfigError(f"{where}: {task!r} is not one of the study's tasks {list(self.tasks)}")
            if not isinstance(plan, dict) or set(plan) - {"encodings", "train", "data", "budget"}:
                raise ConfigError(f"{where}: expected a mapping of 'encodings', 'train', 'data' and/or 'budget', "
                                  f"got {plan!r}")
            names = plan.get("encodings")
            if names is not None:
                if not isinstance(names, list) or not names:
                    raise ConfigError(f"{where}.encodings: a non-empty list of encoding names, got {names!r}")
                unknown = [n for n in names if n not in self.encodings]
                if unknown:
                    raise ConfigError(f"{where}.encodings: {unknown} are not in encodings {list(self.encodings)}")
                if self.baseline not in names:
                    raise ConfigError(f"{where}.encodings: the baseline {self.baseline!r} must be trained on every "
                                      "task (every difference is taken to it); add it to the list")
            for section in ("train", "data", "budget"):
                fields = {f.name for f in dataclasses.fields(getattr(self, section))}
                value = plan.get(section) or {}
                if not isinstance(value, dict) or set(value) - fields:
                    raise ConfigError(f"{where}.{section}: expected fields of {section} ({sorted(fields)}), "
                                      f"got {value!r}")
            sized = self.for_task(task)
            try:
                check_training_sections(sized)
                _check_data(sized.data)
                _check_budget(sized.budget)
            except (ConfigError, TypeError) as err:
                raise ConfigError(f"{where}: {err}") from None
        check_comparisons(self.comparisons, self.encodings)
        self.comparisons = [list(p) for p in self.comparisons if all(n in available for n in p)]

    def fingerprint(self) -> str:
        """What decides the trained models: a resumed study reuses finished models only when this matches."""
        return _fingerprint(self.to_dict())

    def covered_by(self, saved: dict) -> bool:
        """Whether the study whose config is ``saved`` (a ``to_dict``) trained this one's models with the same
        settings: the same model, data and training, and each of this study's tasks among its tasks with the same
        options. A study of some of the tasks (one task's extra encodings, a report of two tasks) then reuses
        the models of the whole."""
        mine = self.to_dict()
        tasks = set(mine["tasks"])
        if not tasks <= set(saved.get("tasks") or {}):
            return False
        return _fingerprint(mine, tasks) == _fingerprint(saved, tasks)


def _fingerprint(d: dict, tasks: set[str] | None = None) -> str:
    """The fingerprint of a task study's config dict, over ``tasks`` only when given."""
    keep = {k: d[k] for k in (*TrainedStudyConfig.FINGERPRINT, "tasks")}
    per_task = d.get("per_task") or {}
    if tasks is not None:
        keep["tasks"] = {t: v for t, v in keep["tasks"].items() if t in tasks}
        per_task = {t: v for t, v in per_task.items() if t in tasks}
    for section in ("train", "data"):  # absent: fingerprints as before
        sized = {t: plan[section] for t, plan in per_task.items() if (plan or {}).get(section)}
        if sized:
            keep[f"per_task_{section}"] = sized
    return digest(keep)


def _check_budget(budget: TaskBudget) -> None:
    c = budget.candidates
    if not isinstance(c, list) or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in c) \
            or len(set(c)) != len(c):
        raise ConfigError(f"budget.candidates: a list of distinct step counts >= 1 (empty: train.steps), got {c!r}")


def _check_data(data: TaskData) -> None:
    for key in ("train", "validation", "test"):
        if getattr(data, key) < 1:
            raise ConfigError(f"data.{key} must be >= 1, got {getattr(data, key)}")
    if data.loss not in LOSSES:
        raise ConfigError(f"data.loss: {data.loss!r} is not one of {LOSSES}")
    if not isinstance(data.vary_with_seed, bool):
        raise ConfigError(f"data.vary_with_seed: true or false, got {data.vary_with_seed!r}")


def _encodings_of(encoding) -> list:
    """The encoding names of an entry's ``encoding``: the name, or those of a layer map's entries."""
    if not isinstance(encoding, dict):
        return [encoding]
    return [e.get("encoding") if isinstance(e, dict) else e for e in encoding.values()]


def patch_config(opts: dict):
    """The ``PatchConfig`` (or ``LayerMap``) of flat patch options as ``hf_trajpe.patch`` takes them
    (:func:`~hf_trajpe.study.config.patch_value`)."""
    return patch_value(opts)


def task_experiment(cfg: TaskStudyConfig, task: str, name: str, options: dict | None, seed: int,
                    output_dir: str | Path, block_size: int = 1) -> ExperimentConfig:
    """The experiment config of one task run: the content study's (model, optimizer, schedule, train) with
    the task's data section, for the record: the rows themselves come from the task
    (:func:`~hf_trajpe.study.tasks.training_rows`), ``block_size`` is their padded length."""
    data = {"path": None, "content_types": [], "train": cfg.data.train, "validation": cfg.data.validation,
            "test": cfg.data.test, "seed": cfg.data.seed, "block_size": block_size, "order": "random"}
    return experiment_config(cfg, f"{task}_{name}", options, seed, output_dir, data=data)
