"""RULER's scoring: the prediction cleaned as RULER cleans it, then string matching against the references.

Reproduced from RULER (Hsieh et al., COLM 2024), ``scripts/eval/synthetic/constants.py`` and
``scripts/eval/evaluate.py`` of NVIDIA/RULER, as lm-evaluation-harness carries them in
``lm_eval/tasks/ruler/common_utils.py`` (``postprocess_pred``, ``string_match_all``, ``string_match_part``).
Scores are fractions in [0, 1] (RULER prints them times 100). ``string_match_part`` is RULER's own (1 when
any reference is found); the harness's copy takes the largest fraction found instead, which differs when a
sample has several references.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["METRICS", "postprocess_pred", "sample_score", "string_match_all", "string_match_part"]

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess_pred(prediction: str) -> str:
    """RULER's cleaning: strip, control characters to newlines, strip again."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def _found(pred: str, ref: Sequence[str]) -> list[float]:
    return [1.0 if r.lower() in pred.lower() else 0.0 for r in ref]


def string_match_all(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of the fraction of a sample's references found (case-insensitive substring) in its
    prediction: RULER's metric of every synthetic task."""
    if len(preds) != len(refs) or not preds:
        raise ValueError(f"string_match_all needs as many predictions as reference lists, at least one; got "
                         f"{len(preds)} and {len(refs)}")
    return sum(sum(_found(p, r)) / len(r) for p, r in zip(preds, refs, strict=True)) / len(preds)


def string_match_part(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of 1 when any of a sample's references is found in its prediction, else 0: RULER's
    metric of its QA tasks."""
    if len(preds) != len(refs) or not preds:
        raise ValueError(f"string_match_part needs as many predictions as reference lists, at least one; got "
                         f"{len(preds)} and {len(refs)}")
    return sum(max(_found(p, r)) for p, r in zip(preds, refs, strict=True)) / len(preds)


#: metric name -> function of (predictions, reference lists)
METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part}


def sample_score(metric: str, prediction: str, references: Sequence[str]) -> float:
    """One sample's score under ``metric`` (the prediction cleaned first)."""
    try:
        fn = METRICS[metric]
    except KeyError:
        raise ValueError(f"unknown RULER metric {metric!r}; known: {', '.join(METRICS)}") from None
    return fn([postprocess_pred(prediction)], [list(references)])
