"""ALiBi: a per-head linear bias on attention scores, ``-m_h (p_i - p_j)`` (causal) or
``-m_h |p_i - p_j|`` (bidirectional) (docs/spec.md, section 2). Linear in position, so fractional
positions are always exact.
"""

from __future__ import annotations

import torch

from ...encodings.alibi import alibi_bias, alibi_slopes
from ..key_bias import centred_key_term
from .scheme import Scheme, register_scheme


@register_scheme
class Alibi(Scheme):
    name = "alibi"
    contributes = "bias"
    fractional = True
    model_own = True
    interpolations = ("exact",)
    interpolation_advice = "ALiBi is linear in position, hence always exact: use interpolation 'exact'"
    needs_key_positions = True

    def _slopes(self, num_heads: int, device: torch.device) -> torch.Tensor:
        """``alibi_slopes(num_heads)`` on ``device``, built once (a decoding step would rebuild it per token)."""
        memo = self.__dict__.setdefault("_slopes_memo", {})
        key = (num_heads, device)
        if key not in memo:
            memo[key] = alibi_slopes(num_heads).to(device)
        return memo[key]

    def attention_bias(self, num_heads: int, query_positions: torch.Tensor, key_positions: torch.Tensor,
                       dtype: torch.dtype) -> torch.Tensor:
        slopes = self._slopes(num_heads, query_positions.device)
        if query_positions.shape[1] == 1 and self.plan.causal and dtype == torch.float32:
            # a decoding step: alibi_bias's values (-m * d == m * -d; only a zero may change sign) in two ops
            distance = key_positions[:, None, None, :] - query_positions[:, None, :, None]  # [b, 1, 1, t]
            return slopes[None, :, None, None] * distance
        return alibi_bias(slopes, query_positions, key_positions, causal=self.plan.causal).to(dtype)

    def key_bias(self, num_heads: int, key_positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The bias as ``head_factor [h] x key_term [b, t]`` up to a constant per softmax row, or ``None``.
        Causal only: ``-m_h (p_i - p_j)`` differs from ``m_h p_j`` by the row term ``-m_h p_i``, which
        cancels in the softmax; the bidirectional ``-m_h |p_i - p_j|`` does not factor. Lets attention
        carry the bias as one more query/key dimension (``patching/key_bias.py``)."""
        if not self.plan.causal:
            return None
        return self._slopes(num_heads, key_positions.device), centred_key_term(key_positions.to(torch.float32))
