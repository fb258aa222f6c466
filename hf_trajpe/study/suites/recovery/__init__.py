"""The recovery study (``suite: recovery``, configs/study/recovery.yaml): a pretrained model (SmolLM2-135M by
default) fine-tuned after its encoding is swapped, and how much of the swap's damage the steps recover."""

from .config import RecoveryStudyConfig
from .suite import RecoverySuite

__all__ = ["RecoveryStudyConfig", "RecoverySuite"]
