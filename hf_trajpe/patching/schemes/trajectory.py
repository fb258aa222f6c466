"""Trajectory positions (docs/spec.md, section 2): positions that advance with how far the content moves,
read by a base scheme at fractional positions. Its options; the positions themselves are computed by
:mod:`hf_trajpe.encodings.trajectory` through the patch state.
"""

from __future__ import annotations

import math

from ...checks import check_beta
from ...encodings.interpolation import INTERPOLATION_MODES
from ...strength import check_strength_option
from .option import Option, boolean, is_number
from .scheme import check_interpolation
from .source import PositionSource, register_source


def _base(value):
    bases = Trajectory.bases()
    if value is not None and value not in bases:
        raise ValueError(f"unknown trajectory base {value!r}; supported bases: {', '.join(bases)}")
    return value


def _interpolation(value):
    if value is not None and value not in INTERPOLATION_MODES:
        raise ValueError(f"unknown interpolation {value!r}; supported: {', '.join(INTERPOLATION_MODES)}")
    return value


def _cache_size(value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"cache_size must be a positive integer, got {value!r}")
    return value


def _extend(value):
    if value is None:
        return None
    if not is_number(value) or value < 1 or not math.isfinite(value):
        raise ValueError(f"extend must be a number >= 1 (read text extend times longer than the trained "
                         f"length: positions advance by 1/extend on average), got {value!r}")
    return float(value)


@register_source
class Trajectory(PositionSource):
    name = "trajectory"
    options = (
        Option("base", None, "a scheme that reads fractional positions, or None",
               "the scheme that reads the positions; None: the model's own (learned for GPT-2/BERT/RoBERTa, rope "
               "for the Llama family and GPT-NeoX)", _base, saved="top"),
        Option("strength", 0.2, "number in [0, 1], or 'auto'",
               "alpha: each step is alpha * tanh(beta * the distance between neighbouring embeddings) (docs/spec.md, "
               "section 2.6); 'auto': per content type",
               check_strength_option, saved="top"),
        Option("learnable_strength", False, "bool", "train alpha (it starts at strength)",
               boolean("learnable_strength"), saved="top"),
        Option("beta", 2.0, "number > 0", "magnitude scaling inside the tanh of each step", check_beta, saved="top"),
        Option("interpolation", None, "'linear', 'cubic', 'exact' or None",
               "how the base is read at fractional positions; None: linear on the learned table, exact otherwise",
               _interpolation, saved="top"),
        Option("detach", False, "bool", "stop gradients from positions into the embeddings", boolean("detach"),
               saved="top"),
        Option("cache", False, "bool", "a displacement cache for forwards without a KV cache (never changes results)",
               boolean("cache"), saved="top"),
        Option("cache_size", 10_000, "integer >= 1", "entries of the displacement cache", _cache_size, saved="top"),
        Option("extend", None, "number >= 1, or None",
               "content-aware context extension: positions advance by 1/extend on average", _extend, saved="top"),
    )

    @classmethod
    def check_values(cls, values: dict) -> dict:
        values["strength"] = check_strength_option(values["strength"], values["learnable_strength"])
        if values["base"] is not None:  # (with base=None the model decides the base: checked when patching)
            check_interpolation(values["base"], values["interpolation"])
        return values
