"""The study: train small models from scratch per encoding, evaluate, report. One engine (:mod:`.engine`)
runs every kind of study; each kind is a suite (:mod:`.suite`) found by the ``suite:`` key of its YAML
(:mod:`.registry`): ``content`` (per content type and context length, the strength sweep, the seed
design's claims) and ``tasks`` (tasks with known answers).

    hf-trajpe study --config configs/study/default.yaml [--quick] [key=value ...]
"""

from .content_config import StudyConfig
from .engine import run_study
from .registry import load_study_config

__all__ = ["StudyConfig", "load_study_config", "run_study"]
