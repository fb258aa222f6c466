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
from .scheme import Scheme, register_scheme, table_rows_for


@register_scheme
class Rope(Scheme):
    name = "rope"
    contributes = "rotary"
    fractional = True
    interpolations = ("exact", "linear", "cubic")
    needs_key_positions = True

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
