"""ReRoPE and leaky ReRoPE (Su, "Rectified Rotary Position Embeddings", 2023; reference code bojone/rerope).

The relative distance of a pair is ``min(i - j, window)``: exact inside the window, the window itself beyond
it, so no distance the model never saw is ever used, whatever the length. With ``leak=k`` (leaky ReRoPE),
distances past the window keep growing, ``k`` times slower: ``window + (i - j - window) / k``.

As positions: inside the window the query at ``i`` and the key at ``j``; beyond it the query at ``window`` and
the key at 0 (ReRoPE), or the query at ``i / k + window - window / k`` and the key at ``j / k`` (leaky). The
reference code also scales the queries by ``log(i + 1) / log(trained length)`` (log-n scaling), a separate
technique not applied here.
"""

from __future__ import annotations

import torch

from ..option import Option, is_number
from ..scheme import register_scheme
from .scheme import WINDOW, RemapScheme

#: the reference code's window (512, for a model trained on 4096 positions) where ``window`` is not given
DEFAULT_WINDOW = 512


def _leak(value):
    if value is not None and not (is_number(value) and value >= 1):
        raise ValueError(f"leak (rerope) must be a number >= 1 (distances past the window grow that many times "
                         f"slower) or None (plain ReRoPE), got {value!r}")
    return None if value is None else float(value)


@register_scheme
class Rerope(RemapScheme):
    name = "rerope"
    default_window = DEFAULT_WINDOW
    options = (
        WINDOW,
        Option("leak", None, "number >= 1, or None",
               "rerope: distances past the window grow leak times slower (leaky ReRoPE); None: they stay at the "
               "window (ReRoPE)", _leak),
        *RemapScheme.options,
    )

    def __init__(self, plan) -> None:
        super().__init__(plan)
        options = plan.config.options
        self.window = int(options["window"])
        self.leak = None if options["leak"] is None else float(options["leak"])

    def regions(self, query_positions, key_positions):
        w = self.window
        if self.leak is None:
            return ((query_positions, key_positions),
                    (torch.full_like(query_positions, float(w)), torch.zeros_like(key_positions)))
        k = self.leak
        return ((query_positions, key_positions), (query_positions / k + (w - w / k), key_positions / k))

    def region_index(self, query_positions, key_positions):
        return (query_positions - key_positions >= self.window).to(torch.int8)

    def extra_repr(self) -> str:
        return f"{self.name}, window={self.window}" + (f", leak={self.leak:g}" if self.leak is not None else "")
