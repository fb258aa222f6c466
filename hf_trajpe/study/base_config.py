"""What every study config holds and does, whatever its suite: the fields each study YAML has (its name, seeds,
folders, training processes, ``quick:`` profile) and the round trip of the file: :meth:`BaseStudyConfig.load`
(the YAML with its ``base:`` files, ``quick:`` profile and ``key=value`` overrides, read into the suite's
dataclass and checked), :meth:`~BaseStudyConfig.to_dict` (what ``study.json`` saves) and
:meth:`~BaseStudyConfig.fingerprint` (what decides the trained models, so a resumed study reuses only what
still fits). :class:`TrainedStudyConfig` adds the sections of the studies that train small models from a
transformers config (``model``, ``tokenizer``, ``train``). A suite's config extends one of them
(:mod:`hf_trajpe.study.suites`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..training.config import ConfigError
from ..training.typed_config import from_dict
from .config import StudyTrain, check_training_sections, read_study_data

__all__ = ["BaseStudyConfig", "TrainedStudyConfig", "digest"]


def digest(value) -> str:
    """The fingerprint of a JSON-able value: 16 hex digits of the SHA-256 of its sorted JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(kw_only=True)
class BaseStudyConfig:
    name: str
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    output_dir: str = "runs/study"
    report_dir: str = "outputs/study"
    workers: int = 2  # training processes at once (one thread each)
    quick: list[str] = field(default_factory=list)  # the --quick profile: dotted overrides

    #: the keys of :meth:`to_dict` in the order saved files list them (empty: the order of the fields)
    ORDER: ClassVar[tuple[str, ...]] = ()
    #: the sections of :meth:`to_dict` that decide the trained models (:meth:`fingerprint`)
    FINGERPRINT: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def load(cls, path: str | Path, quick: bool = False, overrides: list[str] | None = None,
             data: dict | None = None):
        """The study YAML at ``path`` read into this config and checked (``data``: its mapping, read already);
        errors name the file."""
        if data is None:
            data = read_study_data(path, quick, overrides)
        try:
            return from_dict(cls, data).validate()
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None

    def validate(self):
        """Check the config before anything runs; returns it."""
        return self

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: d[k] for k in self.ORDER} if self.ORDER else d

    def fingerprint_dict(self) -> dict:
        """What the fingerprint is taken of: the :data:`FINGERPRINT` sections of :meth:`to_dict`."""
        d = self.to_dict()
        return {k: d[k] for k in self.FINGERPRINT}

    def fingerprint(self) -> str:
        """What decides the trained models (not the report or evaluation settings): a resumed study reuses
        finished models only when this matches."""
        return digest(self.fingerprint_dict())

    @property
    def log_every(self) -> int:
        """Steps per point of a trained run's loss curve (its summary)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how often its runs log")

    def covered_by(self, saved: dict) -> bool:
        """Whether a study whose config is ``saved`` (a :meth:`to_dict`, of another fingerprint) trained this
        one's models with the same settings, so this one may use its ``output_dir``: no, unless a suite says."""
        return False


@dataclass(kw_only=True)
class TrainedStudyConfig(BaseStudyConfig):
    """A study that trains small models from scratch: a transformers config, a tokenizer, the training section."""

    model: dict  # a transformers config: model_type and its fields
    tokenizer: str = "byte"
    train: StudyTrain = field(default_factory=StudyTrain)

    FINGERPRINT: ClassVar[tuple[str, ...]] = ("model", "tokenizer", "data", "train")

    @property
    def log_every(self) -> int:
        return self.train.log_every

    def validate(self):
        check_training_sections(self)
        return self
