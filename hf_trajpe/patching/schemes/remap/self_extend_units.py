"""Self-Extend whose far groups are whole units of meaning (lines, sentences) instead of ``G`` arbitrary tokens.

Self-Extend (``self_extend.py``) rotates a far key at ``j // G`` and a far query at ``i // G + W - W // G``.
Here the grouped position of a token ``t`` is ``s(t) // G``, where ``s(t)`` is the start of the unit holding
``t``, snapped so that no unit spans more than ``G`` tokens (``units.py``): every token of a unit of at
most ``G`` tokens shares one far position, and a far group is made of whole units. As ``t - G < s(t) <= t``,
the average compression is Self-Extend's ``G`` and distances stay integers the model was trained on. Near pairs
(``i - j < W``) keep their true distance, as in Self-Extend. With every token a boundary it is Self-Extend.

The units come from the token ids (``boundary_ids``: the tokens that end a unit, from
:func:`hf_trajpe.unit_boundary_ids` and a tokenizer), so the model must be called with ``input_ids``.
"""

from __future__ import annotations

import torch

from ..option import Option
from ..scheme import register_scheme
from .scheme import WINDOW, RemapScheme
from .self_extend import DEFAULT_WINDOW, GROUP_SIZE, SelfExtend
from .units import UnitMemory, advance

__all__ = ["SelfExtendUnits"]


def _token_ids(value: object) -> list[int]:
    if value is None:
        raise ValueError("boundary_ids (self_extend_units) is required: the ids of the tokens that end a unit, "
                         "e.g. hf_trajpe.unit_boundary_ids(tokenizer)")
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    ids = list(value) if isinstance(value, (list, tuple, set, frozenset)) else None
    if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
        raise ValueError(f"boundary_ids (self_extend_units) must be a non-empty list of token ids (integers >= 0), "
                         f"got {value!r}")
    return sorted(set(ids))


BOUNDARY_IDS = Option(
    "boundary_ids", None, "list of token ids",
    "self_extend_units: the tokens that end a unit (a line, a sentence); hf_trajpe.unit_boundary_ids(tokenizer)",
    _token_ids)


@register_scheme
class SelfExtendUnits(SelfExtend):
    name = "self_extend_units"
    default_window = DEFAULT_WINDOW
    options = (GROUP_SIZE, WINDOW, BOUNDARY_IDS, *RemapScheme.options)
    reads_token_ids = True  # the state hands it each forward's token ids (:meth:`read_units`)

    @classmethod
    def resolve_values(cls, values: dict, model) -> dict:
        """Refuse boundary ids past the model's vocabulary: no token would ever end a unit (plain Self-Extend)."""
        vocab = getattr(model.get_input_embeddings(), "num_embeddings", None)
        outside = [i for i in values.get("boundary_ids") or [] if vocab is not None and i >= vocab]
        if outside:
            raise ValueError(f"boundary_ids (self_extend_units) {outside[:5]} lie outside this model's vocabulary of "
                             f"{vocab} tokens, so they would never end a unit; give ids of its own tokenizer: "
                             "hf_trajpe.unit_boundary_ids(tokenizer)")
        return super().resolve_values(values, model)

    def __init__(self, plan) -> None:
        super().__init__(plan)
        self.register_buffer("boundaries", torch.tensor(plan.config.options["boundary_ids"], dtype=torch.int64),
                             persistent=False)
        #: the units of the sequence being read, up to this forward's tokens (set by :meth:`read_units`)
        self.units: UnitMemory | None = None

    def read_units(self, previous: UnitMemory | None, input_ids: torch.Tensor, rank: torch.Tensor,
                   real: torch.Tensor) -> UnitMemory:
        self.units = advance(previous, input_ids, rank, real, self.boundaries, self.group_size)
        return self.units

    def _grouped(self, positions: torch.Tensor) -> torch.Tensor:
        if self.units is None:
            raise RuntimeError("self_extend_units: no token ids were seen in this forward; call the model with "
                               "input_ids")
        starts = self.units.starts.to(positions.device)
        index = positions.long().clamp_(max=starts.shape[1] - 1)  # (pads: rank 0)
        snapped = starts.gather(1, index)
        return torch.div(snapped, self.group_size, rounding_mode="floor").to(positions.dtype)

    def regions(self, query_positions, key_positions):
        g, w = self.group_size, self.window
        grouped_query = self._grouped(query_positions) + (w - w // g)
        return (query_positions, key_positions), (grouped_query, self._grouped(key_positions))

    def extra_repr(self) -> str:
        return f"{self.name}, group_size={self.group_size}, window={self.window}, {len(self.boundaries)} boundary ids"
