"""Context extension chosen on evidence: ``hf_trajpe.extend`` and ``hf-trajpe extend`` (docs/extend.md).

From a RoPE model and validation text: each method's candidate for the target length from its own formula
(:mod:`.candidates`, with the remaps' settings rule of :mod:`.settings`), a choice rule fixed before any read
(:mod:`.rule`), the validation and test reads (:mod:`.run`, kept in a resumable folder by :mod:`.store`, on the
documents of :mod:`.texts`), and the saved model, its card, the record and the chart (:mod:`.report`).

Names are imported on first use, so that the command line reads the method names (:mod:`.candidates`, standard
library only) without importing torch.
"""

from __future__ import annotations

from importlib import import_module as _import_module

__all__ = ["DEFAULT_METHODS", "METHODS", "Candidate", "Extension", "Rule", "build_candidates", "extend"]

_SOURCES = {"DEFAULT_METHODS": "candidates", "METHODS": "candidates", "Candidate": "candidates",
            "build_candidates": "candidates", "Rule": "rule", "Extension": "run", "extend": "run"}


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_import_module(f"{__name__}.{_SOURCES[name]}"), name)
    globals()[name] = value
    return value
