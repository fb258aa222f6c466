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

``log_scale`` (off by default, the paper's method): the reference code also multiplies cos and sin by
``1 + c ln(n / P)`` once a sequence of ``n`` tokens is longer than the trained length ``P`` (``c = 0.05``, its
``get_mscale``), so every score by the square of that (a temperature, as YaRN's). Here ``n`` is each row's count
of real tokens read so far, so a padded row (left or right) equals the sequence alone. A decoding step scores its
new query at its own length's factor; what the KV cache holds was computed at the lengths it was read at, as in
the reference's cache (whose keys keep the factor of their length, and whose tables keep the largest factor seen
until rebuilt), so cached decoding is not one forward over the whole sequence at its final length.
"""

from __future__ import annotations

import math

import torch

from ..option import Option, is_number
from ..scheme import register_scheme
from .scheme import LOCAL_WINDOW, RemapScheme, integer, rotation_length


def _log_scale(value: object) -> float:
    if not is_number(value) or value < 0 or not math.isfinite(value):
        raise ValueError(f"log_scale (dca) must be a number >= 0 (0: off; the reference code's 0.05), got {value!r}")
    return float(value)


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
        Option("log_scale", 0.0, "number >= 0",
               "dca: scores of a sequence of n tokens past the trained length P are multiplied by (1 + log_scale "
               "ln(n / P))^2, as the reference code's cos/sin (its 0.05); 0: off, the paper's method",
               _log_scale, saved="scheme_options_if_set"),
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
        if values.get("log_scale") and length is None:
            raise ValueError("log_scale (dca) scales past the trained length, and this model's config has no "
                             "max_position_embeddings; give rope_parameters with original_max_position_embeddings")
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
        self.log_scale = float(options.get("log_scale") or 0.0)
        self.trained = plan.trained_length

    def score_scale(self, key_positions: torch.Tensor) -> torch.Tensor | None:
        """``(1 + c ln(n / P))^2`` per row (1 up to ``P``), ``n`` the row's real tokens so far (``[b, t]`` ranks:
        the largest + 1; pads have rank 0, wherever they are); ``None`` when off."""
        if not self.log_scale:
            return None
        n = key_positions.amax(dim=1).to(torch.float32) + 1
        factor = 1 + self.log_scale * torch.log(torch.clamp(n / self.trained, min=1.0))
        return factor * factor

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
        scale = f", log_scale={self.log_scale:g}" if self.log_scale else ""
        return f"{self.name}, chunk_size={self.chunk_size}, local_window={self.local_window}{scale}"

