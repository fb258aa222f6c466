"""What every remap kernel gets and gives: one attention call (:class:`RemapCall`) and the kernel interface
(:class:`Kernel`), plus the exact merge of partial softmaxes by their log-sum-exp that the fused kernels share.

A kernel computes ``softmax(scores) @ values`` where each pair's score is that of its region (``RemapScheme``):
the queries rotated at the region's positions against the keys rotated at the region's key rotation. How it
does so is its own business (a score matrix per block, segments of torch's fused CPU kernel, FlexAttention
with a block mask per region); what it must say is whether it can run a given call (:meth:`Kernel.refusal`)
and whether ``kernel="auto"`` should pass it over for a faster one that follows (:meth:`Kernel.passed_over`).

Shape legend: ``b`` batch, ``h`` query heads, ``g`` key/value heads, ``n`` queries, ``t`` keys, ``d`` head
width, ``m`` rows of one key/value head (its query heads x queries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..keys import RotatedKeys

__all__ = ["Kernel", "RemapCall", "merge_by_lse"]


@dataclass
class RemapCall:
    """One layer's remapped attention: what the attention function got, and what the forward prepared.

    ``query`` ``[b, h, n, d]`` unrotated; ``key`` ``[b, g, t, d]`` unrotated, or ``[b, g, t, R x d]`` rotated once
    per key rotation where a prepared KV cache returned it (``prepared``); ``value`` ``[b, g, t, dv]``;
    ``tables``: per region the rotation table of the queries and ``which`` the index of its key rotation;
    ``query_positions`` ``[b, n]`` and ``key_positions`` ``[b, t]``: the real-token ranks (float32)."""

    st: object
    module: torch.nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float
    dropout: float
    softcap: float | None
    sinks: torch.Tensor | None
    tables: list
    which: list[int]
    query_positions: torch.Tensor
    key_positions: torch.Tensor
    names: tuple[str | None, ...]
    prepared: bool

    @property
    def needs_grad(self) -> bool:
        """Whether autograd runs through this attention."""
        return torch.is_grad_enabled() and any(
            x is not None and x.requires_grad for x in (self.query, self.key, self.value, self.sinks))

    def rotated_keys(self, whole: bool) -> RotatedKeys:
        """The keys of each key rotation, read per range (``whole``: every rotation rotated once, for several
        reads)."""
        width = self.query.shape[-1]
        return RotatedKeys(self.st, self.names, self.key, width, max(self.which) + 1, self.prepared, whole)


class Kernel:
    """A way to compute a remap's attention (module docstring). Stateless: one instance serves every layer."""

    #: the value of the ``kernel`` option that asks for it
    name: ClassVar[str]

    def refusal(self, call: RemapCall) -> str | None:
        """Why this kernel cannot run ``call`` (device, dtype, autograd, dropout, soft-capping, sinks), in words
        that end a sentence; ``None`` when it can."""
        return None

    def passed_over(self, call: RemapCall) -> str | None:
        """Why ``kernel="auto"`` skips this kernel for ``call`` although it could run it (a later one in the list is
        faster there); ``None``: auto takes it."""
        return None

    def run(self, call: RemapCall) -> torch.Tensor:
        """The attention ``[b, h, n, dv]``."""
        raise NotImplementedError


def merge_by_lse(outputs: list[torch.Tensor], lses: list[torch.Tensor], dtype: torch.dtype,
                 sinks: torch.Tensor | None = None, rep: int = 1) -> torch.Tensor:
    """The softmax over the union of disjoint key sets from each set's own: ``outputs`` ``[b, g, m, dv]`` and their
    log-sum-exps ``lses`` ``[b, g, m]`` (``-inf`` where a row saw no key of the set), merged as
    ``sum_s exp(lse_s - lse) o_s`` with ``lse = log sum_s exp(lse_s)`` (what a flash kernel does between key
    blocks), in float32 at least; ``sinks``: a logit per query head ``[g x rep]`` in every softmax, with no output.
    A row that saw no key at all gets zeros."""
    b, g, m, _ = outputs[0].shape
    stacked = torch.stack(lses)  # [s, b, g, m]
    total = torch.logsumexp(stacked, dim=0)
    if sinks is not None:
        sink = sinks.to(torch.float32).reshape(1, g, rep, 1).expand(b, g, rep, m // rep).reshape(b, g, m)
        total = torch.logaddexp(total, sink)
    acc = torch.promote_types(dtype, torch.float32)
    # a query with no key at all: -inf - -inf; out of place, as the backward of exp reads its output
    weights = torch.exp(stacked - total).nan_to_num(0.0).to(acc)
    merged = outputs[0].to(acc) * weights[0, ..., None]
    for out, weight in zip(outputs[1:], weights[1:], strict=True):
        merged.addcmul_(out.to(acc), weight[..., None])
    return merged.to(dtype)
