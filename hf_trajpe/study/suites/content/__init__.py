"""The content study (``suite: content``, configs/study/default.yaml): small models per encoding from scratch on
the seven content types mixed, perplexity per content type and context length against the baseline, the
strength sweep, the random-content control and the seed design's claims."""

from .config import StudyConfig
from .suite import ContentSuite

__all__ = ["ContentSuite", "StudyConfig"]
