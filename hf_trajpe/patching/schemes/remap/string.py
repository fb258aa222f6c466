"""STRING, shifted rotary positions (An et al., "Why Does the Effective Context Length of LLMs Fall Short?",
ICLR 2025; reference code HKUNLP/STRING).

Large relative distances are rarely trained; STRING reuses well-trained ones for them. A pair at distance
``d = i - j`` keeps it while ``d < shift``; from ``shift`` on it gets ``d - shift + local_window`` (the query at
``i - shift + local_window``, the key at ``j``), so distances never exceed ``n - 1 - shift + local_window`` and
the ``local_window`` nearest positions stay reserved for neighbours. ``shift = 0`` switches it off (the
reference scripts run plain RoPE then).

Defaults as the reference code: ``shift`` 0.33 of the trained length (``int(0.33 * P)``; the paper suggests
0.25 to 0.4), ``local_window`` 128 (at most half the shift, for models trained on fewer than 776 positions).
Two details of the reference implementation are not followed: its prefill counts the key at distance exactly
``shift`` in both parts (its sliding window is ``shift + 1`` keys wide; its decoding step and the paper do not),
and it multiplies cos/sin by ``1 + 0.1 ln 2`` in every pair, a temperature outside the method (its decoding and
prefill agree on that one).
"""

from __future__ import annotations

import torch

from ..option import Option
from ..scheme import register_scheme
from .scheme import LOCAL_WINDOW, RemapScheme, integer, rotation_length

#: the reference code's shift, as a share of the trained length
SHIFT_RATIO = 0.33
#: the reference code's local window
DEFAULT_LOCAL_WINDOW = 128


@register_scheme
class String(RemapScheme):
    name = "string"
    #: ``None``: ``shift = int(0.33 * P)`` of the trained length ``P``; ``local_window = min(128, shift // 2)``
    options = (
        Option("shift", None, "integer >= 0, or None",
               "string: distances from shift on are brought down by shift - local_window (0: off); None: 0.33 of "
               "the trained length (of rope_parameters' extension when given)",
               integer("shift (string)", minimum=0, what=" (0 switches STRING off)", optional=True)),
        LOCAL_WINDOW,
        *RemapScheme.options,
    )

    @classmethod
    def check_values(cls, values: dict) -> dict:
        shift, window = values["shift"], values["local_window"]
        if shift and window is not None and window >= shift:
            raise ValueError(f"local_window (string) must be smaller than shift (shifted distances d - shift + "
                             f"local_window would not shrink), got local_window={window}, shift={shift}; give a "
                             "smaller local_window")
        return values

    @classmethod
    def resolve_values(cls, values: dict, model) -> dict:
        shift, window = values["shift"], values["local_window"]
        if shift is None:
            length = rotation_length(values, model)
            if length is None:
                raise ValueError("string: this model's config has no max_position_embeddings (its trained "
                                 "length); give shift")
            shift = int(SHIFT_RATIO * length)
        if window is None:
            window = min(DEFAULT_LOCAL_WINDOW, shift // 2)
        return cls.check_values({**values, "shift": shift, "local_window": window})

    def __init__(self, plan) -> None:
        super().__init__(plan)
        options = plan.config.options
        self.shift, self.local_window = int(options["shift"]), int(options["local_window"])

    def regions(self, query_positions, key_positions):
        if not self.shift:
            return ((query_positions, key_positions),)
        return ((query_positions, key_positions), (query_positions - (self.shift - self.local_window), key_positions))

    def region_index(self, query_positions, key_positions):
        if not self.shift:
            return torch.zeros(torch.broadcast_shapes(query_positions.shape, key_positions.shape), dtype=torch.int8,
                               device=query_positions.device)
        return (query_positions - key_positions >= self.shift).to(torch.int8)

    def extra_repr(self) -> str:
        return f"{self.name}, shift={self.shift}, local_window={self.local_window}"
