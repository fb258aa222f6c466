"""hf_trajpe: swap, fine-tune and measure positional encodings in Hugging Face transformers models.

The building blocks below are pure PyTorch; ``import hf_trajpe`` does not import transformers.
"""

from .cache import DisplacementCache, embedding_version
from .content import CONTENT_TYPES, detect_content_type
from .encodings import (
    INTERPOLATION_MODES,
    SinusoidalTable,
    TrajectoryPast,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    interpolate_rows,
    rotary_cos_sin,
    rotary_inv_freq,
    rotate_every_two,
    rotate_half,
    sinusoidal_encoding,
    sinusoidal_frequencies,
    trajectory_positions,
)
from .monitoring import TrajectoryMonitor, global_monitor
from .patching import SUPPORTED, PatchConfig, PatchHandle, from_pretrained, load_patch, patch, save_patch, unpatch
from .strength import AUTO_STRENGTHS, AutoStrength, FixedStrength, LearnableStrength, make_strength

__version__ = "0.1.0"

__all__ = [
    "AUTO_STRENGTHS",
    "CONTENT_TYPES",
    "INTERPOLATION_MODES",
    "AutoStrength",
    "DisplacementCache",
    "FixedStrength",
    "LearnableStrength",
    "PatchConfig",
    "PatchHandle",
    "SUPPORTED",
    "SinusoidalTable",
    "TrajectoryMonitor",
    "TrajectoryPast",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "detect_content_type",
    "embedding_version",
    "from_pretrained",
    "global_monitor",
    "interpolate_rows",
    "load_patch",
    "make_strength",
    "patch",
    "rotary_cos_sin",
    "rotary_inv_freq",
    "rotate_every_two",
    "rotate_half",
    "save_patch",
    "sinusoidal_encoding",
    "sinusoidal_frequencies",
    "trajectory_positions",
    "unpatch",
]
