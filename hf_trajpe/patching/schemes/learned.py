"""The model's own learned absolute table (GPT-2's ``wpe``, BERT's ``position_embeddings``).

Exists only on models that have one, only at integer rows: at fractional (trajectory) positions its
rows are interpolated, linearly by default (the seed design) or cubically.
"""

from __future__ import annotations

import torch

from ...encodings.interpolation import interpolate_rows
from .scheme import Scheme, register_scheme


@register_scheme
class LearnedTable(Scheme):
    name = "learned"
    contributes = "additive"
    selectable = False  # on a model with a table it is "native"; without one there is nothing to learn from
    fractional = True
    model_own = True
    reads_table = True
    interpolations = ("linear", "cubic")
    interpolation_advice = "a learned table exists only at integer rows: use interpolation linear or cubic"

    @classmethod
    def supported_by(cls, provides: frozenset[str]) -> bool:
        return "table" in provides

    def additive(self, positions: torch.Tensor, table: torch.Tensor | None) -> torch.Tensor:
        offset = self.plan.table_offset
        rows = table[offset:] if offset else table
        if self.plan.interpolation is None:  # integer positions
            return rows[positions.long()]
        return interpolate_rows(rows, positions, self.plan.interpolation)
