"""Rotary position embedding: queries and keys rotated by ``p * theta_k`` (docs/spec.md, section 2).

On a model with its own rotary module the module's frequencies (``inv_freq``, ``attention_scaling``)
are kept, so ``rope`` on a RoPE model is the stock model; elsewhere the rotation happens inside
attention with ``rope_theta`` (default 10000). Analytic, so fractional positions are exact by default;
``linear``/``cubic`` interpolate a table of cos/sin at integer positions.
"""

from __future__ import annotations

import torch

from ...encodings.interpolation import interpolate_rows
from ...encodings.rotary import rotary_cos_sin
from ..rope_scaling import check_rope_parameters
from .option import Option, is_number
from .scheme import Scheme, register_scheme, table_rows_for

#: how an option of the rotation is refused where none is applied
WITHOUT_ROTATION = ("{name} applies only where a rotation is applied ({takers}); {desc} sets no rotation of its "
                    "own, so it would be ignored: leave {name} out")


def _rope_theta(value):
    if not (is_number(value) and value > 1):
        raise ValueError(f"rope_theta must be a number > 1, got {value!r}")
    return value


def _rope_parameters(value):
    return None if value is None else check_rope_parameters(value)


def _rotary_fraction(value):
    if value is None:
        return None
    if not (is_number(value) and 0 < value <= 1):
        raise ValueError(f"rotary_fraction must be a number in (0, 1] (the share of each head that rotates), "
                         f"got {value!r}")
    return float(value)


ROPE_THETA = Option(
    "rope_theta", 10000.0, "number > 1",
    "base of the rotary frequencies where the rotation runs inside attention (a model without a rotary module, "
    "or rotary_fraction); a model's own rotary module keeps its own", _rope_theta, saved="top",
    refusal=WITHOUT_ROTATION)
ROPE_PARAMETERS = Option(
    "rope_parameters", None, "dict (transformers' config.rope_parameters), or None",
    "context extension of the rotation: rope_type default, linear, dynamic, yarn, longrope, llama3 or ntk with "
    "their keys, saved with every default filled in", _rope_parameters, saved="top_if_set",
    refusal="rope_parameters extends a rotary encoding: give it with {takers}, not {desc}")
ROTARY_FRACTION = Option(
    "rotary_fraction", None, "number in (0, 1], or None",
    "the share of each head's width that rotates (the rest passes unrotated), at default frequencies; None: the "
    "model's own width", _rotary_fraction, saved="top_if_set", format_version=2, refusal=WITHOUT_ROTATION)


@register_scheme
class Rope(Scheme):
    name = "rope"
    contributes = "rotary"
    fractional = True
    interpolations = ("exact", "linear", "cubic")
    needs_key_positions = True
    model_own = True
    options = (ROPE_THETA, ROPE_PARAMETERS, ROTARY_FRACTION)

    @classmethod
    def check_values(cls, values: dict) -> dict:
        if values["rotary_fraction"] is not None and values["rope_parameters"] is not None:
            raise ValueError("rotary_fraction and rope_parameters cannot be combined: rotary_fraction rotates part "
                             "of each head with default frequencies; give one or the other")
        return values

    def __init__(self, plan) -> None:
        super().__init__(plan)
        self._table: dict = {}  # one cos|sin table [rows, r] for the current frequency tensor

    def rotary_cos_sin(self, positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float,
                       dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        mode = self.plan.interpolation or "exact"
        if mode == "exact":
            return rotary_cos_sin(positions, inv_freq=inv_freq, attention_scaling=attention_scaling, dtype=dtype)
        key = (inv_freq.data_ptr(), inv_freq.device)
        table = self._table.get(key)
        rows = self.plan.max_positions if table is None else 0
        if self.plan.max_positions is None:  # no limit: the table grows to what the positions need
            rows = table_rows_for(positions, 0 if table is None else table.shape[0])
        if rows:
            grid = torch.arange(rows, device=inv_freq.device, dtype=torch.float32)
            cos, sin = rotary_cos_sin(grid, inv_freq=inv_freq, attention_scaling=attention_scaling)
            table = torch.cat((cos, sin), dim=-1)
            self._table = {key: table}
        both = interpolate_rows(table, positions, mode)
        cos, sin = both.chunk(2, dim=-1)
        return cos.to(dtype), sin.to(dtype)
