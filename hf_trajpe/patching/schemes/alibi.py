"""ALiBi: a per-head linear bias on attention scores, ``-m_h (p_i - p_j)`` (causal) or
``-m_h |p_i - p_j|`` (bidirectional) (docs/spec.md, section 2). Linear in position, so fractional
positions are always exact.
"""

from __future__ import annotations

import torch

from ...encodings.alibi import alibi_bias, alibi_slopes
from .scheme import Scheme, register_scheme


@register_scheme
class Alibi(Scheme):
    name = "alibi"
    contributes = "bias"
    fractional = True
    interpolations = ("exact",)
    interpolation_advice = "ALiBi is linear in position, hence always exact: use interpolation 'exact'"
    needs_key_positions = True

    def attention_bias(self, num_heads: int, query_positions: torch.Tensor, key_positions: torch.Tensor,
                       dtype: torch.dtype) -> torch.Tensor:
        slopes = alibi_slopes(num_heads).to(query_positions.device)
        return alibi_bias(slopes, query_positions, key_positions, causal=self.plan.causal).to(dtype)
