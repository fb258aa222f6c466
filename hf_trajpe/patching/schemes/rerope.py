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

import math

import torch

from .remap import RemapScheme, positive_int
from .scheme import register_scheme


@register_scheme
class Rerope(RemapScheme):
    name = "rerope"
    #: the reference code's window (512, for a model trained on 4096 positions); no leak
    options = {"window": 512, "leak": None}

    @classmethod
    def check_option(cls, name: str, value: object) -> object:
        if name == "window":
            return positive_int(cls.name, name, value, what=" (the distances kept exact)")
        if name == "leak" and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                                      and value >= 1):
                raise ValueError(f"leak (rerope) must be a number >= 1 (distances past the window grow that many "
                                 f"times slower) or None (plain ReRoPE), got {value!r}")
            return float(value)
        return value

    def __init__(self, plan) -> None:
        super().__init__(plan)
        options = plan.config.scheme_options
        self.window = int(options["window"])
        self.leak = None if options.get("leak") is None else float(options["leak"])

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
