"""Self-Extend (Jin et al., "LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning", ICML 2024;
reference code datamllab/LongLM).

A pair closer than the neighbour window (``i - j < window``) keeps its positions; a farther pair uses grouped
positions, the key at ``j // G`` and the query at ``i // G + W - W // G`` (``G = group_size``, ``W = window``),
so its distance is at least ``W - W // G`` plus the grouped distance, and a sequence of length ``n`` addresses
positions below ``(n - 1) // G + W - W // G``: ``G`` times the trained length, less the window's share.

The reference code first shifted the grouped query by ``W - W / G`` (true division) and changed it to
``W - W // G`` in its commit 715c1e3, as here; with a window that is a multiple of the group size, as in its
examples (1024 and 8), the two agree. Its optional log-scaling of the
queries is not part of the method and not applied here.
"""

from __future__ import annotations

import torch

from ..option import Option
from ..scheme import register_scheme
from .scheme import WINDOW, RemapScheme, integer

#: the reference code's window (``group_size_2``) where ``window`` is not given
DEFAULT_WINDOW = 1024
#: the reference code's group (``group_size_1``)
GROUP_SIZE = Option(
    "group_size", 8, "integer >= 1",
    "Self-Extend: the positions merged into one beyond the neighbour window (the reference code's 8)",
    integer("group_size (self_extend)", what=" (the number of positions merged into one)"))


@register_scheme
class SelfExtend(RemapScheme):
    name = "self_extend"
    default_window = DEFAULT_WINDOW
    options = (GROUP_SIZE, WINDOW, *RemapScheme.options)

    def __init__(self, plan) -> None:
        super().__init__(plan)
        options = plan.config.options
        self.group_size, self.window = int(options["group_size"]), int(options["window"])

    def regions(self, query_positions, key_positions):
        g, w = self.group_size, self.window
        grouped_query = torch.div(query_positions, g, rounding_mode="floor") + (w - w // g)
        grouped_key = torch.div(key_positions, g, rounding_mode="floor")
        return (query_positions, key_positions), (grouped_query, grouped_key)

    def region_index(self, query_positions, key_positions):
        return (query_positions - key_positions >= self.window).to(torch.int8)

    def extra_repr(self) -> str:
        return f"{self.name}, group_size={self.group_size}, window={self.window}"
