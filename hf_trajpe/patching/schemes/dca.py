"""Dual chunk attention (An et al., "Training-Free Long-Context Scaling of Large Language Models", ICML 2024;
reference code HKUNLP/ChunkLlama, ``chunkllama_attn_replace.py``).

The sequence is cut into chunks of ``c = chunk_size - local_window`` tokens (by real-token rank) and every key
is rotated at its place in its chunk, ``j mod c``. The query's position depends on where the key is:

- *intra-chunk* (same chunk): ``i mod c``, so the distance is the true ``i - j``;
- *successive-chunk* (the chunk just before): ``min(i mod c + c, chunk_size)``: the first ``local_window + 1``
  queries of a chunk keep their true distance to the previous chunk, the others stay at ``chunk_size``;
- *inter-chunk* (any earlier chunk): ``min(2c - 1, chunk_size)`` for every query.

No distance exceeds ``chunk_size``, which must therefore not exceed the trained length. Defaults as the
reference code: ``chunk_size`` three quarters of the trained length, ``local_window`` an eighth of it. A
sequence no longer than ``chunk_size`` gets its true distances (the stock model).
"""

from __future__ import annotations

import torch

from .remap import RemapScheme, positive_int
from .scheme import register_scheme


@register_scheme
class DualChunk(RemapScheme):
    name = "dca"
    #: ``None``: from the trained length ``P`` (``chunk_size = 3 P // 4``, ``local_window = P // 8``)
    options = {"chunk_size": None, "local_window": None}

    @classmethod
    def check_option(cls, name: str, value: object) -> object:
        if value is None:
            return None
        if name == "chunk_size":
            return positive_int(cls.name, name, value, minimum=2, what=" (the largest relative position used)")
        if name == "local_window":
            return positive_int(cls.name, name, value, minimum=0,
                                what=" (queries that keep their true distance to the previous chunk)")
        return value

    @classmethod
    def check_options(cls, given: dict) -> dict:
        options = super().check_options(given)
        size, window = options["chunk_size"], options["local_window"]
        if size is not None and window is not None and window >= size:
            raise ValueError(f"local_window (dca) must be smaller than chunk_size (chunks hold chunk_size - "
                             f"local_window tokens), got local_window={window}, chunk_size={size}")
        return options

    @classmethod
    def options_for_model(cls, options: dict, trained_length: int | None) -> dict:
        options = dict(options)
        if trained_length is None and None in options.values():
            raise ValueError("dca: this model's config has no max_position_embeddings (its trained length); give "
                             "chunk_size and local_window")
        if options["chunk_size"] is None:
            options["chunk_size"] = trained_length * 3 // 4
        if options["local_window"] is None:
            options["local_window"] = trained_length // 8
        if trained_length is not None and options["chunk_size"] > trained_length:
            raise ValueError(f"chunk_size (dca) must not exceed the trained length {trained_length} (relative "
                             f"positions reach chunk_size), got {options['chunk_size']}; the reference uses "
                             f"three quarters of it, {trained_length * 3 // 4}")
        return cls.check_options(options)

    def __init__(self, plan) -> None:
        super().__init__(plan)
        options = plan.config.scheme_options
        self.chunk_size, self.local_window = int(options["chunk_size"]), int(options["local_window"])
        self.chunk = self.chunk_size - self.local_window

    def regions(self, query_positions, key_positions):
        c, size = self.chunk, float(self.chunk_size)
        in_chunk = torch.remainder(query_positions, c)
        key = torch.remainder(key_positions, c)
        successive = (in_chunk + c).clamp(max=size)
        inter = torch.full_like(query_positions, min(2.0 * c - 1.0, size))
        return (in_chunk, key), (successive, key), (inter, key)

    def region_index(self, query_positions, key_positions):
        c = self.chunk
        apart = torch.div(query_positions, c, rounding_mode="floor") - torch.div(key_positions, c,
                                                                                rounding_mode="floor")
        return apart.clamp(0, 2).to(torch.int8)

    def extra_repr(self) -> str:
        return f"{self.name}, chunk_size={self.chunk_size}, local_window={self.local_window}"
