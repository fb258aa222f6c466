"""Local ``evaluate`` metric modules shipped with the package, thin wrappers of the registered metrics.

Loading a metric by name (``evaluate.load("accuracy")``) goes to the Hub and fails offline; these
load from their folder: ``evaluate.load(str(metric_path("token_accuracy")))``. The module files keep
one import per line: evaluate parses them to check requirements (docs/notes.md, section 7).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["METRIC_NAMES", "load_metric", "metric_path"]

METRIC_NAMES = ("token_cross_entropy", "token_accuracy")
_HERE = Path(__file__).resolve().parent


def metric_path(name: str) -> Path:
    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; shipped: {METRIC_NAMES}")
    return _HERE / name


@cache
def load_metric(name: str):
    """``evaluate.load`` of a shipped metric, from its folder (never the Hub)."""
    import evaluate

    return evaluate.load(str(metric_path(name)))
