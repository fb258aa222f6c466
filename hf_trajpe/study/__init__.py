"""The study: train small models from scratch per encoding, evaluate per content type and
context length, sweep the trajectory strength, report against the seed design's claims.

    hf-trajpe study --config configs/study/default.yaml [--quick] [key=value ...]
"""

from .config import StudyConfig, load_study_config
from .runner import run_study

__all__ = ["StudyConfig", "load_study_config", "run_study"]
