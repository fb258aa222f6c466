"""The study: train models per encoding, evaluate, report. One engine (:mod:`.engine`) runs every kind of
study; each kind is a suite (:mod:`.suite`) in its own folder under :mod:`.suites`, found by the ``suite:`` key
of its YAML (:mod:`.registry`, :mod:`.loading`): ``content`` (per content type and context length, the strength
sweep, the seed design's claims), ``tasks`` (tasks with known answers), ``extension`` (reading past the trained
length) and ``recovery`` (fine-tuning a pretrained model back after its encoding is swapped).

    hf-trajpe study --config configs/study/default.yaml [--quick] [key=value ...]
"""

from .engine import run_study
from .loading import load_study_config
from .suites.content.config import StudyConfig

__all__ = ["StudyConfig", "load_study_config", "run_study"]
