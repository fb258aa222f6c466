"""The seed design's claimed ranges (docs/spec.md, section 4.6; claims, not facts) and the claim verdict.

The claims are about adding trajectory guidance to an encoding, so :func:`verdict` is for one comparison
only: a trajectory model against the same encoding without trajectory (the study's ``trajectory_pairs``).
Every other comparison (an encoding against a baseline table) gets a plain significance verdict with an
equivalence bound (:mod:`hf_trajpe.evaluation.verdicts`), never a claim verdict.

Claim verdict of a measured delta's 95% interval ``[lo, hi]`` against a claimed range ``[a, b]`` (percent):

- ``lo <= 0 <= hi``: "no significant difference";
- on ``random_content``, ``lo > 0``: "HARNESS PROBLEM" (no encoding can help on uniform random
  tokens; a measured improvement means the evaluation is broken, or the models are under-trained:
  docs/spec.md, section 4.5);
- ``hi < a``: "below the claim" (``hi < 0``: the encoding is significantly worse than the baseline);
- ``lo > b``: "above the claim";
- otherwise the interval overlaps the claimed range: "within the claim".
"""

from __future__ import annotations

__all__ = ["CALIBRATION", "CLAIMED_IMPROVEMENT", "CLAIMED_STRENGTH", "CONTROL_TYPE", "HARNESS_PROBLEM", "VERDICTS",
           "verdict"]

CLAIMED_IMPROVEMENT: dict[str, tuple[float, float]] = {
    "linear_progression": (5.0, 15.0),
    "convergent_flow": (10.0, 20.0),
    "circular_patterns": (15.0, 25.0),
    "divergent_expansion": (8.0, 18.0),
    "dialogue_structure": (10.0, 25.0),
    "code_hierarchy": (15.0, 30.0),
    "random_content": (0.0, 2.0),
}
CLAIMED_STRENGTH: dict[str, str] = {
    "linear_progression": "0.1-0.2",
    "convergent_flow": "0.1-0.3",
    "circular_patterns": "0.2-0.3",
    "divergent_expansion": "0.1-0.2",
    "dialogue_structure": "0.1-0.2",
    "code_hierarchy": "0.2-0.3",
    "random_content": "none",
}
CONTROL_TYPE = "random_content"
HARNESS_PROBLEM = "HARNESS PROBLEM: improvement on random content"
#: what the study puts in place of HARNESS_PROBLEM when the control's diagnosis shows under-trained models
CALIBRATION = "calibration (under-trained models), not position"
VERDICTS = ("within the claim", "below the claim", "below the claim (worse than the baseline)",
            "above the claim", "no significant difference", HARNESS_PROBLEM, "no claim")


def verdict(ci: tuple[float, float], content_type: str) -> str:
    """The claim verdict of a trajectory model against its own base encoding (see the module docstring)."""
    lo, hi = ci
    if lo <= 0.0 <= hi:
        return "no significant difference"
    if content_type == CONTROL_TYPE and lo > 0.0:
        return HARNESS_PROBLEM
    claim = CLAIMED_IMPROVEMENT.get(content_type)
    if claim is None:
        return "no claim"
    if hi < 0.0:
        return "below the claim (worse than the baseline)"
    if hi < claim[0]:
        return "below the claim"
    if lo > claim[1]:
        return "above the claim"
    return "within the claim"
