"""The choice rule of ``hf-trajpe extend``, written into the output before any read, and applied to the
validation losses.

A candidate's validation loss is the mean per-token cross-entropy of the validation documents' tokens, pooled
over the documents, in two spans: *inside* the trained length (tokens 1 to ``T - 1``) and *past* it (tokens
``T`` to ``N - 1``). The rule: the lowest loss past the trained length among the candidates whose perplexity
inside it is at most ``tolerance`` percent above stock's. Stock itself passes that test, so the model is extended
only where an extension reads the far tokens better; a candidate the model refused is passed over. Ties go to the
earlier candidate (stock first, then the order of ``--methods``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["Rule", "Spans", "spans"]


@dataclass(frozen=True)
class Spans:
    """Pooled losses of one candidate's validation reads: summed loss and token count inside and past ``T``."""

    inside_sum: float
    inside_tokens: int
    past_sum: float
    past_tokens: int

    @property
    def inside(self) -> float:
        return self.inside_sum / self.inside_tokens

    @property
    def past(self) -> float:
        return self.past_sum / self.past_tokens

    def to_dict(self) -> dict:
        return {"loss_inside": self.inside, "loss_past": self.past, "ppl_inside": math.exp(self.inside),
                "ppl_past": math.exp(self.past), "tokens_inside": self.inside_tokens, "tokens_past": self.past_tokens}


def spans(nlls: Sequence[torch.Tensor], trained: int) -> Spans:
    """Pool ``token_nll`` of each document (position ``i`` predicts token ``i + 1``): tokens at positions
    ``1 .. T - 1`` inside, ``T ..`` past."""
    inside = [n[:trained - 1] for n in nlls]
    past = [n[trained - 1:] for n in nlls]
    return Spans(float(sum(float(x.sum()) for x in inside)), sum(int(x.numel()) for x in inside),
                 float(sum(float(x.sum()) for x in past)), sum(int(x.numel()) for x in past))


@dataclass(frozen=True)
class Rule:
    """Lowest loss past ``T`` among the candidates at most ``tolerance`` percent worse than stock inside ``T``."""

    tolerance: float = 1.0  # percent of stock's perplexity inside the trained length

    def text(self, trained: int, target: int) -> str:
        return (f"the candidate with the lowest validation loss past the trained length (tokens {trained:,} to "
                f"{target - 1:,}, pooled over the validation documents), among the candidates whose perplexity "
                f"inside it (tokens 1 to {trained - 1:,}) is at most {self.tolerance:g}% above stock's; stock is a "
                "candidate too, so the model is extended only where an extension reads the far tokens better; "
                "ties go to the earlier candidate")

    def to_dict(self, trained: int, target: int) -> dict:
        return {"text": self.text(trained, target), "tolerance_percent": self.tolerance,
                "inside_tokens": [1, trained - 1], "past_tokens": [trained, target - 1]}

    def eligible(self, scores: Spans, stock: Spans) -> bool:
        return math.exp(scores.inside - stock.inside) <= 1 + self.tolerance / 100 + 1e-12

    def choose(self, scores: dict[str, Spans], stock: str = "stock") -> str:
        """The chosen name among ``scores`` (in candidate order; candidates that were refused are left out)."""
        if stock not in scores:
            raise ValueError("the rule compares with stock: read it first")
        base = scores[stock]
        best = None
        for name, s in scores.items():
            if self.eligible(s, base) and (best is None or s.past < scores[best].past):
                best = name
        return best
