"""The metric registry: every number a report scores a model by is one registered :class:`Metric`.

A metric module (``evaluation/metrics/<name>.py``) defines the function that computes it and registers it
with :func:`register_metric`; reports and scorers look it up with :func:`get_metric` and never hold a
formula of their own, so a metric has one definition, one display format and one place to change it.

``inputs`` says what a metric scores from (one of :data:`INPUTS`); ``aggregation`` says, in words, how the
per-token or per-example values become one number; ``per_example``, where the metric has one, gives the
per-example values (and their weights) whose weighted mean is the metric: the unit that intervals over
examples resample.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["INPUTS", "METRICS", "Metric", "get_metric", "metric_names", "register_metric"]

#: what a metric scores from
INPUTS = {
    "token_losses": "the loss (negative log-likelihood, nats) of each scored token, or its sums over units with "
                    "their token counts",
    "token_predictions": "the arg-max prediction against the reference token at each scored position (teacher "
                         "forcing), or its counts of right tokens per unit",
    "generated_text": "text the model generated, against reference strings",
}


@dataclass(frozen=True)
class Metric:
    """One metric: how to compute it and how to show it.

    ``compute``: the metric from its inputs (its docstring names them); ``per_example``: ``(values, weights or
    None)`` per example, whose weighted mean is ``compute`` of the same inputs (None where the metric does not
    decompose over examples); ``label``: its name in a report; the value is shown as ``scale * value`` with
    ``digits`` decimals, in ``unit`` (``"%"``, ``"nats"``, ``""``)."""

    name: str
    compute: Callable[..., Any]
    inputs: str
    aggregation: str
    higher_is_better: bool
    label: str
    description: str
    unit: str = ""
    digits: int = 2
    scale: float = 1.0
    per_example: Callable[..., Any] | None = None

    def __call__(self, *args, **kwargs):
        return self.compute(*args, **kwargs)

    def format(self, value: float | None) -> str:
        """The value as a report prints it (no unit sign): ``n/a`` for a missing or non-finite value."""
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return "n/a"
        shown = value if self.scale == 1.0 else self.scale * value
        return f"{shown:.{self.digits}f}"


#: every registered metric, by name, in registration order
METRICS: dict[str, Metric] = {}


def register_metric(metric: Metric) -> Metric:
    """Add ``metric`` to :data:`METRICS`; a name registered twice or an unknown ``inputs`` is refused."""
    if metric.name in METRICS:
        raise ValueError(f"metric {metric.name!r} is registered twice; give the new one another name")
    if metric.inputs not in INPUTS:
        raise ValueError(f"metric {metric.name!r}: unknown inputs {metric.inputs!r}; one of {', '.join(INPUTS)}")
    METRICS[metric.name] = metric
    return metric


def get_metric(name: str) -> Metric:
    """The registered metric ``name``; an unknown name is refused with the list of known ones."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))} (a new metric is a module of "
                         "hf_trajpe/evaluation/metrics/: docs/evaluation.md, section Metrics)") from None


def metric_names() -> list[str]:
    return list(METRICS)
