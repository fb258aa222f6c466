"""Units of meaning of a token sequence (lines, sentences), for the content-aware Self-Extend
(``self_extend_units.py``): per token, the rank of the start of its unit, snapped so that no unit spans
more than ``G`` tokens, carried across the forwards of a generation on the KV cache.

A unit starts at the first real token and after every boundary token (one whose text holds a line break or ends
a sentence: :func:`boundary_ids`). A unit longer than ``G`` tokens is cut every ``G`` tokens from its start, so
the snapped start ``s(t) = b(t) + G * floor((t - b(t)) / G)`` of a token ``t`` in the unit starting at ``b(t)``
lies within ``G - 1`` tokens of it, as plain grouping's ``G * floor(t / G)`` does. Only the tokens at and before
``t`` decide ``s(t)``: a key's snapped start is final when it enters the cache.

Shape legend: ``b`` batch, ``n`` new tokens, ``T`` real tokens so far (the longest row).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

__all__ = ["UNITS", "UnitMemory", "advance", "boundary_ids", "resolve_boundary_ids", "unit_names"]

#: unit -> does a token's text end one (``text``: the token decoded alone)
UNITS = {
    "line": lambda text: "\n" in text,
    "sentence": lambda text: text.rstrip(" \t\"')]}").endswith((".", "!", "?")),
}


@dataclass
class UnitMemory:
    """What a generation carries between forwards (on the KV cache, with the patch's other decoding state)."""

    starts: torch.Tensor  # [b, T] int64: per rank, the snapped start of its unit (beyond a row's tokens: 0)
    last_boundary: torch.Tensor  # [b] int64: the rank of the row's last boundary token, -1 for none

    def reorder(self, idx: torch.Tensor) -> UnitMemory:
        return UnitMemory(self.starts.index_select(0, idx), self.last_boundary.index_select(0, idx))


def advance(memory: UnitMemory | None, input_ids: torch.Tensor, rank: torch.Tensor, real: torch.Tensor,
            boundaries: torch.Tensor, group: int) -> UnitMemory:
    """The memory after this forward's tokens ``input_ids`` ``[b, n]`` with their ``rank`` and ``real`` flags
    ``[b, n]`` (pads: not real); ``boundaries``: the boundary token ids ``[k]``."""
    b = input_ids.shape[0]
    device = input_ids.device
    carry = memory.last_boundary.to(device) if memory is not None else torch.full((b,), -1, device=device,
                                                                                  dtype=torch.int64)
    marks = torch.where(torch.isin(input_ids, boundaries.to(device)) & real, rank, -1)
    seen = torch.cummax(torch.cat((carry[:, None], marks), dim=1), dim=1).values  # [b, n + 1]
    start = seen[:, :-1] + 1  # after the last boundary before each token
    snapped = start + group * torch.div(rank - start, group, rounding_mode="floor")
    old = memory.starts.to(device) if memory is not None else torch.zeros(b, 0, dtype=torch.int64, device=device)
    width = max(old.shape[1], int(torch.where(real, rank + 1, 0).max()) if real.numel() else 0, 1)
    starts = torch.zeros(b, width, dtype=torch.int64, device=device)
    starts[:, :old.shape[1]] = old
    rows = torch.arange(b, device=device)[:, None].expand_as(rank)
    starts.index_put_((rows[real], rank[real]), snapped[real])
    return UnitMemory(starts, seen[:, -1])


def boundary_ids(tokenizer, units: Iterable[str] = ("line", "sentence")) -> list[int]:
    """The ids of the tokens of ``tokenizer`` that end a unit of ``units`` (names of :data:`UNITS`), from each
    token's text decoded alone; special tokens are left out."""
    units = list(units)
    unknown = [u for u in units if u not in UNITS]
    if unknown or not units:
        raise ValueError(f"units must be among {', '.join(UNITS)}, got {units!r}")
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ends = [UNITS[u] for u in units]
    ids = [i for i in range(len(tokenizer)) if i not in special
           and any(end(tokenizer.decode([i])) for end in ends)]
    if not ids:
        raise ValueError(f"no token of this tokenizer ends a {' or '.join(units)}; give boundary_ids yourself")
    return ids


def unit_names(options: dict) -> list[str] | None:
    """The unit names that patch options give as ``boundary_ids`` (``"line"``, ``["line", "sentence"]``: a command
    line's JSON can only name them), checked; ``None`` where they give ids (or nothing)."""
    value = options.get("boundary_ids")
    names = [value] if isinstance(value, str) else value
    if not (isinstance(names, list) and names and all(isinstance(v, str) for v in names)):
        return None
    unknown = [n for n in names if n not in UNITS]
    if unknown:
        raise ValueError(f"boundary_ids: units must be among {', '.join(UNITS)}, got {names!r}")
    return names


def resolve_boundary_ids(options: dict, tokenizer) -> dict:
    """Patch options with ``boundary_ids`` given as unit names (:func:`unit_names`) turned into the ids of
    ``tokenizer``'s tokens; other options as they are."""
    names = unit_names(options)
    return options if names is None else {**options, "boundary_ids": boundary_ids(tokenizer, names)}
