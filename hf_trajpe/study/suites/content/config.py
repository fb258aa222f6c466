"""The content study's YAML (``configs/study/default.yaml``, ``suite: content``) as typed dataclasses,
checked before anything trains: the encodings, the data and evaluation sections, the strength sweep and
the comparisons (the sections every suite shares: :mod:`.config`). A ``quick:`` list of overrides inside the
file is the ``--quick`` profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ....training.config import ConfigError
from ...base_config import TrainedStudyConfig
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

__all__ = ["StudyConfig", "StudyData", "StudyEval", "StudySweep"]


@dataclass
class StudyData:
    train: int = 600  # train documents per content type
    test: int = 200  # test documents per content type
    seed: int = 0
    block_size: int = 128


@dataclass
class StudyEval:
    length_multipliers: list[int] = field(default_factory=lambda: [1, 2, 4])
    max_sequences: int = 24  # test blocks per type at the longest length
    n_resamples: int = 2000
    level: float = 0.95
    batch_size: int = 16
    #: probability on the random alphabet from which a model counts as trained on random content: below it, a
    #: "gain" there is calibration of an under-trained model; above it, a failure of the harness (:mod:`.control`)
    calibrated_mass: float = 0.99


@dataclass
class StudySweep:
    """Trajectory at several fixed strengths, compared with strength 0 (which is ``base`` exactly)."""

    encoding: dict = field(default_factory=dict)  # patch options without the strength
    strengths: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.2, 0.3, 0.5])
    seeds: list[int] | None = None  # None: the study's seeds


@dataclass(kw_only=True)
class StudyConfig(TrainedStudyConfig):
    encodings: dict  # name -> patch options ({"encoding": "native"} for the unpatched model)
    baseline: str
    data: StudyData = field(default_factory=StudyData)
    eval: StudyEval = field(default_factory=StudyEval)
    sweep: StudySweep | None = None
    trajectory_pairs: dict = field(default_factory=dict)  # trajectory name -> the encoding it runs on
    #: "no effect" is claimed only within this bound: equivalence (two one-sided tests) within ±margin percent of
    #: relative perplexity delta
    equivalence_margin: float = 2.0
    #: [model, reference] pairs compared besides the baseline and trajectory_pairs (trajectory against CoPE)
    comparisons: list[list[str]] = field(default_factory=list)
    correction: str = "holm"  # across the report's comparisons: holm or bh (the other is shown beside)
    analysis: AnalysisPlan = field(default_factory=AnalysisPlan)  # the family in words, changes after a look

    ORDER: ClassVar[tuple[str, ...]] = (
        "name", "model", "encodings", "baseline", "seeds", "output_dir", "report_dir", "tokenizer", "workers",
        "data", "train", "eval", "sweep", "trajectory_pairs", "equivalence_margin", "quick", "comparisons",
        "correction", "analysis")

    def validate(self) -> StudyConfig:
        from ....patching import PatchConfig

        check_encoding_names(self.encodings)
        for name, opts in self.encodings.items():
            if not isinstance(opts, dict) or "encoding" not in opts:
                raise ConfigError(f"encodings.{name}: expected a mapping with an 'encoding' key, got {opts!r}")
            try:
                patch_value(opts)  # npos_max and other scheme options included; a layer map
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
        check_layers_on_model(self.model, self.encodings)
        check_margin(self.equivalence_margin)
        check_correction(self.correction)
        self.analysis.check()
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
