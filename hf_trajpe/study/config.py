"""The study's YAML (``configs/study/*.yaml``) as typed dataclasses, checked before anything trains,
and the experiment config (:mod:`hf_trajpe.training`) each of its runs trains with.

Reuses the experiment config's parser (unknown keys fail naming the closest valid one and the valid
keys; dotted ``key=value`` overrides), and its checks: the ``model`` section is a transformers config
checked key by key, and every encoding's experiment config is validated like a recipe's. A ``quick:``
list of overrides inside the file is the ``--quick`` profile.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import check_name
from ..training.config import (
    ConfigError,
    ExperimentConfig,
    check_transformers_config,
    config_from_dict,
    read_yaml,
)
from ..training.typed_config import apply_overrides, from_dict

__all__ = ["StudyConfig", "experiment_config", "load_study_config", "patch_options", "NATIVE"]

#: the encoding name in ``encodings`` that means "the model as built, not patched"
NATIVE = "native"


@dataclass
class StudyData:
    train: int = 600  # train documents per content type
    test: int = 200  # test documents per content type
    seed: int = 0
    block_size: int = 128


@dataclass
class StudyTrain:
    steps: int = 600
    batch_size: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    max_grad_norm: float = 1.0
    log_every: int = 25


@dataclass
class StudyEval:
    length_multipliers: list[int] = field(default_factory=lambda: [1, 2, 4])
    max_sequences: int = 24  # test blocks per type at the longest length
    n_resamples: int = 2000
    level: float = 0.95
    batch_size: int = 16
    #: probability on the random alphabet from which a model counts as trained on random content: below it, a
    #: "gain" there is calibration of an under-trained model; above it, a failure of the harness (study/control.py)
    calibrated_mass: float = 0.99


@dataclass
class StudySweep:
    """Trajectory at several fixed strengths, compared with strength 0 (which is ``base`` exactly)."""

    encoding: dict = field(default_factory=dict)  # patch options without the strength
    strengths: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.2, 0.3, 0.5])
    seeds: list[int] | None = None  # None: the study's seeds


@dataclass
class StudyConfig:
    name: str
    model: dict  # a transformers config: model_type and its fields
    encodings: dict  # name -> patch options ({"encoding": "native"} for the unpatched model)
    baseline: str
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    output_dir: str = "runs/study"
    report_dir: str = "outputs/study"
    tokenizer: str = "byte"
    workers: int = 2  # training processes at once (one thread each)
    data: StudyData = field(default_factory=StudyData)
    train: StudyTrain = field(default_factory=StudyTrain)
    eval: StudyEval = field(default_factory=StudyEval)
    sweep: StudySweep | None = None
    trajectory_pairs: dict = field(default_factory=dict)  # trajectory name -> the encoding it runs on
    #: "no effect" is claimed only within this bound: equivalence (two one-sided tests) within ±margin percent of
    #: relative perplexity delta
    equivalence_margin: float = 2.0
    quick: list[str] = field(default_factory=list)  # the --quick profile: dotted overrides
    #: [model, reference] pairs compared besides the baseline and trajectory_pairs (trajectory against CoPE)
    comparisons: list[list[str]] = field(default_factory=list)

    def validate(self) -> StudyConfig:
        from ..patching import PatchConfig

        check_encoding_names(self.encodings)
        for name, opts in self.encodings.items():
            if not isinstance(opts, dict) or "encoding" not in opts:
                raise ConfigError(f"encodings.{name}: expected a mapping with an 'encoding' key, got {opts!r}")
            try:
                PatchConfig.from_options(**opts)  # npos_max and other scheme options included
            except (TypeError, ValueError) as err:
                raise ConfigError(f"encodings.{name}: {err}") from None
        if self.baseline not in self.encodings:
            raise ConfigError(f"baseline {self.baseline!r} is not one of the encodings {list(self.encodings)}")
        for traj, base in self.trajectory_pairs.items():
            for n in (traj, base):
                if n not in self.encodings:
                    raise ConfigError(f"trajectory_pairs: {n!r} is not one of the encodings {list(self.encodings)}")
        check_comparisons(self.comparisons, self.encodings)
        check_training_sections(self)
        check_margin(self.equivalence_margin)
        if not 0 < self.eval.calibrated_mass <= 1:
            raise ConfigError(f"eval.calibrated_mass must be in (0, 1], got {self.eval.calibrated_mass}")
        if self.eval.n_resamples < 1 or not 0 < self.eval.level < 1 or self.eval.batch_size < 1:
            raise ConfigError(f"eval: n_resamples >= 1, 0 < level < 1 (0.95 for 95%) and batch_size >= 1 are "
                              f"needed; got n_resamples={self.eval.n_resamples}, level={self.eval.level}, "
                              f"batch_size={self.eval.batch_size}")
        if self.eval.max_sequences < 1 or not self.eval.length_multipliers:
            raise ConfigError("eval: max_sequences >= 1 and at least one length multiplier are needed")
        if self.sweep is not None:
            if "strength" in self.sweep.encoding:
                raise ConfigError("sweep.encoding: leave 'strength' out, it comes from sweep.strengths")
            for s in self.sweep.strengths:
                try:
                    PatchConfig(**{**self.sweep.encoding, "strength": s})
                except (TypeError, ValueError) as err:
                    raise ConfigError(f"sweep (strength {s}): {err}") from None
            if 0.0 not in self.sweep.strengths:
                raise ConfigError("sweep.strengths must include 0 (the reference every strength is compared with)")
        for name, opts in self.encodings.items():  # what the runs train with, checked like a recipe's config
            try:
                experiment_config(self, name, patch_options(opts), self.seeds[0], Path(self.output_dir) / name)
            except ConfigError as err:
                raise ConfigError(f"encodings.{name}: the experiment config its runs train with (hf_trajpe.training; "
                                  "train.lr is its optimizer.lr, train.steps its train.max_steps, train.warmup_steps "
                                  f"its schedule.warmup_steps) is invalid: {err}") from None
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """What decides the trained models (not the report or evaluation settings): a resumed study
        reuses finished models only when this matches."""
        d = self.to_dict()
        keep = {k: d[k] for k in ("model", "tokenizer", "data", "train")}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def check_encoding_names(encodings: dict) -> None:
    """At least one encoding, each named so that its runs' folders (``<name>_s<seed>``) stay inside
    ``output_dir/models`` (:func:`hf_trajpe.paths.check_name`)."""
    if not isinstance(encodings, dict) or not encodings:
        raise ConfigError("encodings: at least one encoding is needed (a mapping of name -> patch options)")
    for name in encodings:
        try:
            check_name(name, "encodings")
        except ValueError as err:
            raise ConfigError(str(err)) from None


def check_training_sections(cfg) -> None:
    """The checks a study config's seeds, model, workers and train sections share (content and task studies)."""
    if not cfg.seeds or len(set(cfg.seeds)) != len(cfg.seeds):
        raise ConfigError(f"seeds: a non-empty list of distinct integers, got {cfg.seeds}")
    check_transformers_config(cfg.model, "model")
    if cfg.workers < 1:
        raise ConfigError(f"workers must be >= 1, got {cfg.workers}")
    for key in ("steps", "batch_size", "log_every"):
        if getattr(cfg.train, key) < 1:
            raise ConfigError(f"train.{key} must be >= 1, got {getattr(cfg.train, key)}")
    if not cfg.train.lr > 0 or cfg.train.warmup_steps < 0:
        raise ConfigError(f"train: lr must be > 0 and warmup_steps >= 0, got {cfg.train.lr} and "
                          f"{cfg.train.warmup_steps}")


def check_comparisons(pairs: list, encodings: dict) -> None:
    """``comparisons``: each a ``[model, reference]`` pair of two different encodings of the study."""
    for pair in pairs:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(n in encodings for n in pair)
                and pair[0] != pair[1]):
            raise ConfigError(f"comparisons: each entry is [model, reference], two different names of encodings "
                              f"{list(encodings)}; got {pair!r}")


def check_margin(margin: float) -> None:
    if not margin > 0:
        raise ConfigError(f"equivalence_margin must be > 0 (the bound of 'no effect'), got {margin}")


def patch_options(opts: dict) -> dict | None:
    """The keyword arguments of ``hf_trajpe.patch`` for one encoding entry (``None``: not patched)."""
    opts = dict(opts)
    if opts.get("encoding") == NATIVE and len(opts) == 1:
        return None
    return opts


def experiment_config(cfg: StudyConfig, name: str, options: dict | None, seed: int,
                      output_dir: str | Path, data: dict | None = None) -> ExperimentConfig:
    """The experiment config one study run trains with (``Trainer`` of :mod:`hf_trajpe.training`, the
    recipe's loop): the ``model`` transformers config from scratch (causal LM), patched with ``options``
    (None: the model as built), the content types under ``output_dir/data`` in equal shares (the data
    folder of the study, its types in alphabetical order) drawn at random with replacement from ``seed``,
    AdamW with a linear warm-up then linear decay to 10% of ``train.lr``, on the CPU, nothing logged.
    ``data``: another data section (the task study's, :mod:`hf_trajpe.study.task_config`)."""
    from ..data.registry import names

    t = cfg.train
    encoding = None
    if options is not None:
        opts = dict(options)
        encoding = {"name": opts.pop("encoding"), "options": opts}
    if data is None:
        data = {"path": str(Path(cfg.output_dir) / "data"), "content_types": sorted(names()),
                "train": cfg.data.train, "validation": 0, "test": cfg.data.test, "seed": cfg.data.seed,
                "block_size": cfg.data.block_size, "balance": True, "order": "random"}
    return config_from_dict({
        "name": f"{name}_s{seed}", "output_dir": str(output_dir), "seed": seed,
        "model": {"config": dict(cfg.model), "task": "clm", "tokenizer": cfg.tokenizer},
        "encoding": encoding,
        "data": data,
        "optimizer": {"name": "adamw", "lr": t.lr, "weight_decay": t.weight_decay},
        "schedule": {"name": "linear", "warmup_steps": t.warmup_steps, "min_lr_ratio": 0.1},
        "train": {"max_steps": t.steps, "batch_size": t.batch_size, "max_grad_norm": t.max_grad_norm,
                  "mixed_precision": "no", "log_every": t.log_every, "device": "cpu"},
        "logging": {"trackers": [], "progress": False},
    })


def load_study_config(path: str | Path, quick: bool = False, overrides: list[str] | None = None) -> StudyConfig:
    """Read a study YAML; ``quick`` applies its ``quick:`` overrides, then ``overrides``. A YAML with a
    ``tasks:`` section is the task study's (:class:`~hf_trajpe.study.task_config.TaskStudyConfig`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"study config {str(path)!r} does not exist (see configs/study/default.yaml)")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a study config must be a mapping of keys, got {type(data).__name__}")
    data = copy.deepcopy(data)
    try:
        if quick:
            profile = data.get("quick") or []
            if not profile:
                raise ConfigError("--quick: this config has no 'quick:' list of overrides")
            data = apply_overrides(data, list(profile))
        data = apply_overrides(data, overrides or [])
        if "tasks" in data:
            from .task_config import TaskStudyConfig

            return from_dict(TaskStudyConfig, data).validate()
        return from_dict(StudyConfig, data).validate()
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
