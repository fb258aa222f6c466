"""Checks of the trajectory options that every entry point shares (the library, ``PatchConfig``, the
command line). Standard library only, so the command line can run them before importing torch.
"""

from __future__ import annotations

import math

__all__ = ["check_beta", "check_strength_value"]


def check_strength_value(value: float) -> float:
    """A fixed strength (alpha) as a float in [0, 1]: the fraction of a step a token may move."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"strength must be a float in [0, 1], got {type(value).__name__} {value!r}")
    value = float(value)
    if not (0.0 <= value <= 1.0):  # also False for NaN
        raise ValueError(f"strength {value!r} is outside [0, 1] (docs/spec.md, section 2.12); use e.g. 0.2 "
                         "(0 = integer positions)")
    return value


def check_beta(value: float) -> float:
    """The magnitude scaling beta as a finite float > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"beta (magnitude scaling) must be a finite number > 0, got {value!r}; use e.g. 2.0")
    return float(value)
