"""Positional schemes as plug-ins: one module each, registered by name (see ``scheme.py``).

Import order is registration order, which is the order error messages and ``SUPPORTED`` list them.
"""

from . import sinusoidal, rope, alibi, nope, learned, cope  # noqa: F401, I001  (registers them, in this order)
from . import self_extend, rerope, string, dca  # noqa: F401, I001  (remaps of the model's own rotary: remap.py)
from .scheme import CONTRIBUTIONS, SCHEMES, Scheme, check_interpolation, get_scheme, register_scheme

__all__ = ["CONTRIBUTIONS", "SCHEMES", "Scheme", "check_interpolation", "encoding_names", "get_scheme",
           "register_scheme", "trajectory_base_names"]


def encoding_names() -> tuple[str, ...]:
    """What ``hf_trajpe.patch`` accepts as ``encoding``: the model's own, each selectable scheme, trajectory."""
    return ("native", *(n for n, c in SCHEMES.items() if c.selectable), "trajectory")


def trajectory_base_names() -> tuple[str, ...]:
    """Schemes that read fractional positions, hence can carry trajectory positions."""
    return tuple(n for n, c in SCHEMES.items() if c.fractional)
