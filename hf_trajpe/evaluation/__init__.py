"""Evaluation on the content types (docs/spec.md, section 4): per-type cross-entropy, perplexity and token
accuracy, deltas against a baseline with bootstrap intervals, length extrapolation, and reports
(JSON, Markdown, PNG). Every metric is registered in :mod:`.metrics` (``get_metric``). See ``docs/evaluation.md``.

``import hf_trajpe.evaluation`` imports torch and numpy; ``evaluate``, ``datasets``, transformers and
matplotlib are imported when used.
"""

from .bootstrap import bootstrap_ci, delta_pct, delta_with_intervals, percentile_interval
from .claims import CLAIMED_IMPROVEMENT, CLAIMED_STRENGTH, HARNESS_PROBLEM, verdict
from .evaluate_models import EvaluationResult, content_streams, evaluate_models, load_model, paired_deltas
from .masking import lm_inputs, mask_tokens
from .metrics import get_metric, load_metric, metric_path
from .report import write_report
from .scoring import Scores, detect_mode, mask_blocks, score_blocks
from .verdicts import DEFAULT_MARGIN, equivalent, plain_verdict, significance

__all__ = [
    "CLAIMED_IMPROVEMENT",
    "CLAIMED_STRENGTH",
    "DEFAULT_MARGIN",
    "HARNESS_PROBLEM",
    "EvaluationResult",
    "Scores",
    "bootstrap_ci",
    "content_streams",
    "delta_pct",
    "delta_with_intervals",
    "detect_mode",
    "equivalent",
    "evaluate_models",
    "get_metric",
    "load_metric",
    "lm_inputs",
    "load_model",
    "mask_blocks",
    "mask_tokens",
    "metric_path",
    "paired_deltas",
    "percentile_interval",
    "plain_verdict",
    "score_blocks",
    "significance",
    "verdict",
    "write_report",
]
