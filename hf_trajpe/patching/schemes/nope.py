"""NoPE: no positional signal at all; a causal model still tells order from its mask."""

from __future__ import annotations

from .scheme import Scheme, register_scheme


@register_scheme
class NoPositions(Scheme):
    name = "none"
    contributes = "nothing"
