"""The sinusoid of "Attention Is All You Need", added to the token embeddings (docs/spec.md, section 2).

Analytic, so fractional positions are evaluated exactly by default; ``linear``/``cubic`` read the seed
design's precomputed table instead (their error is measured in docs/encodings.md).
"""

from __future__ import annotations

import torch

from ...encodings.sinusoidal import SinusoidalTable, sinusoidal_encoding
from .scheme import Scheme, register_scheme, table_rows_for


@register_scheme
class Sinusoidal(Scheme):
    name = "sinusoidal"
    contributes = "additive"
    fractional = True
    interpolations = ("exact", "linear", "cubic")

    @classmethod
    def check_model(cls, plan) -> None:
        if plan.width % 2:
            raise ValueError(f"sinusoidal encoding needs an even model width, got hidden_size={plan.width}")

    def __init__(self, plan) -> None:
        super().__init__(plan)
        self.table = None
        self.interpolated = plan.interpolation not in (None, "exact")
        if self.interpolated and plan.max_positions is not None:
            self.table = SinusoidalTable(plan.max_positions, plan.width)

    def additive(self, positions: torch.Tensor, table: torch.Tensor | None) -> torch.Tensor:
        """float32 ``[b, n, d]``, times ``sinusoid_scale``; the engine casts to the model's dtype."""
        if self.interpolated:
            if self.plan.max_positions is None:  # no limit: the table grows to what the positions need
                rows = table_rows_for(positions, self.table.max_positions if self.table is not None else 0)
                if rows:  # (a row does not depend on the table's size)
                    self.table = SinusoidalTable(rows, self.plan.width).to(positions.device)
            pe = self.table(positions, self.plan.interpolation)
        else:
            pe = sinusoidal_encoding(positions, self.plan.width)
        scale = self.plan.sinusoid_scale
        return pe if scale == 1.0 else pe * scale
