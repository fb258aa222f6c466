"""Contextual Position Encoding (CoPE; Golovneva et al. 2024, arXiv 2405.18719; docs/spec.md, section 2.15).

For query ``i`` and key ``j <= i`` of one head: gates ``g_ij = sigmoid(q_i . k_j * scaling)`` (the
scaled logits the attention itself uses), positions ``p_ij = sum_{k=j..i} g_ik`` over the keys the
query may attend to (causal and padding), clamped to ``npos_max - 1``, and a learned vector
``e[p]`` per integer position, read at ``p_ij`` by linear interpolation between its floor and ceil;
``q_i . e(p_ij)`` is added to the attention logits. The positions come from the queries and keys of
each layer, so nothing is shared across layers, and the ``q . k`` logits are computed a second time
for the gates (attention costs two to three times as much: docs/patching.md, CoPE).

The vectors are per self-attention module, ``[head_width, npos_max]`` each (shared by the heads of
the module), zero at patch time as in the reference implementation: a freshly patched model has no
positional signal until they are trained.

``position_logit_scale``: how ``q_i . e(p_ij)`` enters the logits. ``"unscaled"`` (the default, the
paper's code listing: added to the already scaled ``q . k`` logits as it is) or ``"sqrt_d"`` (the reference
repository, facebookresearch/RAM ``projects/cope``: it divides ``q . k + q . e`` by ``sqrt(head_width)``
together, so the position term is divided by ``sqrt(head_width)`` too). The two are the same family of
models (``e`` rescaled by ``sqrt(head_width)``); from zero vectors only the effective learning rate of ``e``
differs, which is what a study may want to match.
"""

from __future__ import annotations

import torch
from torch import nn

from .option import Option
from .scheme import Scheme, register_scheme

#: the most learned positions (the same bound as ``max_positions``)
MAX_NPOS = 2**20
#: ``position_logit_scale`` -> the factor of ``q . e(p)`` given the head width
POSITION_LOGIT_SCALES = {"unscaled": lambda head_width: 1.0, "sqrt_d": lambda head_width: head_width ** -0.5}


def _npos_max(value):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NPOS:
        raise ValueError(f"npos_max (cope) must be an integer from 1 to {MAX_NPOS:,}, got {value!r}")
    return value


def _position_logit_scale(value):
    if not isinstance(value, str) or value not in POSITION_LOGIT_SCALES:
        names = ", ".join(map(repr, POSITION_LOGIT_SCALES))
        raise ValueError(f"position_logit_scale (cope) must be one of {names} (the paper's listing, or the "
                         f"reference repository's division by sqrt(head width)); got {value!r}")
    return value


@register_scheme
class Cope(Scheme):
    name = "cope"
    contributes = "score"
    bidirectional = False
    # No flex_attention: p_ij sums the gates of all keys from j to the query, which a flex score_mod (one
    # score at a time) cannot compute. Feeding flex the precomputed [b, h, n, t] term would build the very
    # matrix flex exists to avoid, at the cost of the sdpa path plus a compile per shape: sdpa is the answer.
    attention_implementations = ("eager", "sdpa")
    #: why an implementation is refused (the plan adds it to its message)
    attention_refusals = {
        "flex_attention": "its positions are cumulative sums of gates over each query's keys, which a flex "
                          "score_mod cannot compute; the precomputed term would cost what sdpa costs",
    }
    options = (
        Option("npos_max", 64, f"integer from 1 to {MAX_NPOS:,}",
               "the learned positions per layer (contextual positions are clamped to npos_max - 1)", _npos_max),
        Option("position_logit_scale", "unscaled", ", ".join(map(repr, POSITION_LOGIT_SCALES)),
               "how q . e(p) enters the logits: as it is (the paper's listing) or divided by sqrt(head width) "
               "(the reference repository)", _position_logit_scale),
    )

    @classmethod
    def check_model(cls, plan) -> None:
        if not plan.attention_modules or not plan.head_dim:
            raise NotImplementedError(f"cope needs self-attention modules with a known head width; "
                                      f"{plan.family.name} has none bound")

    def __init__(self, plan) -> None:
        super().__init__(plan)
        self.npos_max = int(plan.config.options["npos_max"])
        self.position_logit_scale = str(plan.config.options["position_logit_scale"])
        self.position_factor = float(POSITION_LOGIT_SCALES[self.position_logit_scale](plan.head_dim))
        self.vectors = nn.ParameterList(
            nn.Parameter(torch.zeros(plan.head_dim, self.npos_max)) for _ in range(plan.attention_modules)
        )

    def score_bias(self, index: int, query: torch.Tensor, key: torch.Tensor, scaling: float,
                   allowed: torch.Tensor | None) -> torch.Tensor:
        acc = torch.promote_types(query.dtype, torch.float32)  # positions are summed in float32 at least
        logits = torch.matmul(query * scaling, key.transpose(-1, -2))  # the attention's scaled logits
        gates = torch.sigmoid(logits.to(acc))  # [b, h, n, t]
        if allowed is not None:
            gates = torch.where(allowed, gates, 0.0)
        # p_ij = sum_{k >= j} g_ik, summed from the query back (a masked key adds nothing)
        positions = gates.flip(-1).cumsum_(dim=-1).flip(-1).clamp_(max=self.npos_max - 1)
        at_rows = torch.matmul(query, self.vectors[index].to(query.dtype)).to(acc)  # [b, h, n, npos]: q . e[p]
        if self.position_factor != 1.0:
            at_rows = at_rows * self.position_factor
        slopes = torch.diff(at_rows, dim=-1, append=at_rows[..., -1:])  # q . (e[p + 1] - e[p]); 0 at the end
        floor = positions.floor()
        rows = floor.long()
        weight = positions - floor  # in [0, 1); the gradient into the gates flows through here
        return torch.addcmul(at_rows.gather(-1, rows), weight, slopes.gather(-1, rows)).to(query.dtype)

    def extra_repr(self) -> str:
        return (f"{self.name}, npos_max={self.npos_max}, position_logit_scale={self.position_logit_scale}, "
                f"layers={len(self.vectors)}")
