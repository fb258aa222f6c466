"""The sinusoid of "Attention Is All You Need", added to the token embeddings (docs/spec.md, section 2).

Analytic, so fractional positions are evaluated exactly by default; ``linear``/``cubic`` read the seed
design's precomputed table instead (their error is measured in docs/encodings.md).
"""

from __future__ import annotations

import math

import torch

from ...encodings.sinusoidal import SinusoidalTable, sinusoidal_encoding
from .option import Option, is_number
from .scheme import Scheme, register_scheme, table_rows_for


def _sinusoid_scale(value):
    if value == "embeddings" and isinstance(value, str):
        return value
    if not (is_number(value) and value > 0):
        raise ValueError(f"sinusoid_scale must be a number > 0 or 'embeddings', got {value!r}")
    return float(value)


def embedding_matched_scale(model) -> float:
    """The sinusoid amplitude whose RMS equals the RMS of the token embedding matrix.

    An interleaved unit sinusoid has RMS ``1/sqrt(2)`` over its width, hence the ``sqrt(2)``."""
    weight = model.get_input_embeddings().weight.detach()
    rms = weight.float().pow(2).mean().sqrt().item()
    if not math.isfinite(rms) or rms <= 0:
        raise ValueError(f"cannot match the sinusoid to token embeddings of RMS {rms}; pass a number as sinusoid_scale")
    return math.sqrt(2.0) * rms


@register_scheme
class Sinusoidal(Scheme):
    name = "sinusoidal"
    contributes = "additive"
    fractional = True
    interpolations = ("exact", "linear", "cubic")
    options = (
        Option("sinusoid_scale", 1.0, "number > 0, or 'embeddings'",
               "amplitude of the added sinusoid; 'embeddings': the RMS of the model's token embeddings at patch "
               "time (saved as that number)", _sinusoid_scale, saved="top",
               refusal="sinusoid_scale applies only to {takers}, not {desc}"),
    )

    @classmethod
    def resolve_values(cls, values: dict, model) -> dict:
        if values["sinusoid_scale"] == "embeddings":
            values = {**values, "sinusoid_scale": embedding_matched_scale(model)}
        return values

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
