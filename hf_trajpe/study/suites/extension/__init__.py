"""The extension study (``suite: extension``, configs/study/extension.yaml): how well each context-extension
method reads text longer than a model's trained length, zero-shot, after a short fine-tune, and on a real
pretrained model."""

from .config import ExtensionStudyConfig
from .suite import ExtensionSuite

__all__ = ["ExtensionStudyConfig", "ExtensionSuite"]
