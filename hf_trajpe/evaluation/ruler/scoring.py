"""RULER's scoring: the prediction cleaned as RULER cleans it, then string matching against the references.

Reproduced from RULER (Hsieh et al., COLM 2024), ``scripts/eval/synthetic/constants.py`` and
``scripts/eval/evaluate.py`` of NVIDIA/RULER, as lm-evaluation-harness carries them in
``lm_eval/tasks/ruler/common_utils.py`` (``postprocess_pred``, ``string_match_all``, ``string_match_part``).
The two scores themselves are the metric registry's (one definition for the whole package).
Scores are fractions in [0, 1] (RULER prints them times 100). ``string_match_part`` is RULER's own (1 when
any reference is found); the harness's copy takes the largest fraction found instead, which differs when a
sample has several references.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..metrics import get_metric

__all__ = ["METRICS", "postprocess_pred", "sample_score", "string_match_all", "string_match_part"]

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess_pred(prediction: str) -> str:
    """RULER's cleaning: strip, control characters to newlines, strip again."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


#: RULER's two scores, as the metric registry defines them (``hf_trajpe.evaluation.metrics``)
string_match_all = get_metric("string_match_all").compute
string_match_part = get_metric("string_match_part").compute
#: metric name -> function of (predictions, reference lists)
METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part}


def sample_score(metric: str, prediction: str, references: Sequence[str]) -> float:
    """One sample's score under ``metric`` (the prediction cleaned first)."""
    try:
        fn = METRICS[metric]
    except KeyError:
        raise ValueError(f"unknown RULER metric {metric!r}; known: {', '.join(METRICS)}") from None
    return fn([postprocess_pred(prediction)], [list(references)])
