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

from ..option import Option
from ..scheme import register_scheme
from .scheme import LOCAL_WINDOW, RemapScheme, integer, rotation_length


@register_scheme
class DualChunk(RemapScheme):
    name = "dca"
    #: ``None``: from the trained length ``P`` (``chunk_size = 3 P // 4``, ``local_window = P // 8``)
    options = (
        Option("chunk_size", None, "integer >= 2, at most the trained length, or None",
               "dca: the largest relative distance (chunks hold chunk_size - local_window tokens); None: three "
               "quarters of the trained length (of rope_parameters' extension when given)",
               integer("chunk_size (dca)", minimum=2, what=" (the largest relative position used)", optional=True)),
        LOCAL_WINDOW,
        *RemapScheme.options,
    )

    @classmethod
    def check_values(cls, values: dict) -> dict:
        size, window = values["chunk_size"], values["local_window"]
        if size is not None and window is not None and window >= size:
            raise ValueError(f"local_window (dca) must be smaller than chunk_size (chunks hold chunk_size - "
                             f"local_window tokens), got local_window={window}, chunk_size={size}")
        return values

    @classmethod
    def resolve_values(cls, values: dict, model) -> dict:
        length = rotation_length(values, model)
        size, window = values["chunk_size"], values["local_window"]
        if length is None:
            if size is None or window is None:
                raise ValueError("dca: this model's config has no max_position_embeddings (its trained length); "
                                 "give chunk_size and local_window")
            return values
        size = length * 3 // 4 if size is None else size
        if size > length:
            raise ValueError(f"chunk_size (dca) must not exceed the trained length {length} (relative positions "
                             f"reach chunk_size), got {size}; the reference uses three quarters of it, "
                             f"{length * 3 // 4}")
        window = length // 8 if window is None else window
        return cls.check_values({**values, "chunk_size": size, "local_window": window})

    def __init__(self, plan) -> None:
        super().__init__(plan)
        options = plan.config.options
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
