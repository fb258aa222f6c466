"""The metrics reports score models by, one module each, registered by name (:mod:`.registry`).

    >>> from hf_trajpe.evaluation.metrics import get_metric
    >>> get_metric("perplexity")(loss_total, token_total)

- content (per-token losses and predictions): ``cross_entropy``, ``perplexity``, ``token_accuracy``;
- tasks with known answers (teacher-forced answer tokens): ``exact_match``, ``answer_token_accuracy``;
- long context: ``perplexity_by_window``, ``passkey_retrieval``;
- generated answers against reference strings (RULER): ``string_match_all``, ``string_match_part``.

A new metric is a module here that calls :func:`register_metric`, and its import line below
(docs/evaluation.md, section Metrics). ``evaluate_modules/`` holds the two local ``evaluate`` modules
(``load_metric``), which compute through these.
"""

from __future__ import annotations

from . import (  # noqa: F401  (each module registers its metric)
    answer_token_accuracy,
    cross_entropy,
    exact_match,
    passkey_retrieval,
    perplexity,
    perplexity_by_window,
    string_match_all,
    string_match_part,
    token_accuracy,
)
from .evaluate_modules import METRIC_NAMES, load_metric, metric_path
from .registry import INPUTS, METRICS, Metric, get_metric, metric_names, register_metric

__all__ = ["INPUTS", "METRICS", "METRIC_NAMES", "Metric", "get_metric", "load_metric", "metric_names", "metric_path",
           "register_metric"]
