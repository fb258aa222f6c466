"""Positional-encoding building blocks: pure PyTorch, no transformers import."""

from .alibi import alibi_bias, alibi_slopes
from .interpolation import INTERPOLATION_MODES, InterpolationMode, interpolate_rows
from .rotary import (
    RotaryLayout,
    apply_rotary,
    rotary_cos_sin,
    rotary_inv_freq,
    rotate_every_two,
    rotate_half,
)
from .sinusoidal import SinusoidalTable, sinusoidal_encoding, sinusoidal_frequencies
from .trajectory import TrajectoryPast, trajectory_positions

__all__ = [
    "INTERPOLATION_MODES",
    "InterpolationMode",
    "RotaryLayout",
    "SinusoidalTable",
    "TrajectoryPast",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "interpolate_rows",
    "rotary_cos_sin",
    "rotary_inv_freq",
    "rotate_every_two",
    "rotate_half",
    "sinusoidal_encoding",
    "sinusoidal_frequencies",
    "trajectory_positions",
]
