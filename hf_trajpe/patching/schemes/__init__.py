"""Positional schemes and position sources as plug-ins: one module each, registered by name (see
``scheme.py`` and ``source.py``), each declaring its own options (``option.py``; which encoding takes which:
``encodings.py``).

Import order is registration order, which is the order error messages and ``SUPPORTED`` list them.
"""

from . import sinusoidal, rope, alibi, nope, learned, cope, trajectory  # noqa: F401, I001  (registers them, in this order)
from . import remap  # noqa: F401, I001  (the remaps of the model's own rotary: one plug-in package)
from .encodings import NATIVE, declared_options, encoding_names, trajectory_base_names
from .option import Option
from .scheme import CONTRIBUTIONS, SCHEMES, Scheme, check_interpolation, get_scheme, register_scheme
from .source import SOURCES, PositionSource, register_source

__all__ = ["CONTRIBUTIONS", "NATIVE", "SCHEMES", "SOURCES", "Option", "PositionSource", "Scheme",
           "check_interpolation", "declared_options", "encoding_names", "get_scheme", "register_scheme",
           "register_source",
           "trajectory_base_names"]
