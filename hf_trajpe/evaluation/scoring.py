"""Score one model on blocks of token ids: per-sequence nll, scored tokens and correct predictions.

Works with any model that takes ``input_ids``/``attention_mask`` and returns ``.logits``:

- ``mode="clm"`` (causal LM): every next token is scored, ``L - 1`` per block of ``L``;
- ``mode="mlm"`` (BERT family): 15% of each block's non-special positions (at least one) are
  replaced by ``[MASK]`` and scored. The positions depend only on ``(mask_seed, block index)``, so
  every model sees the same masked blocks.

Inputs and labels come from :func:`~hf_trajpe.evaluation.masking.lm_inputs`, the function training uses.

The headline numbers are the registered metrics ``cross_entropy``, ``perplexity`` and ``token_accuracy``
(:mod:`hf_trajpe.evaluation.metrics`), pooled over every scored token.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from .masking import MASK_RATE, lm_inputs, mask_blocks
from .metrics import get_metric

__all__ = ["MASK_RATE", "Scores", "detect_mode", "mask_blocks", "score_blocks"]


@dataclass
class Scores:
    """Per test sequence: ``nll`` (summed, nats), ``count`` (scored tokens), ``correct``; plus metrics."""

    nll: np.ndarray
    count: np.ndarray
    correct: np.ndarray
    metrics: dict

    def summary(self) -> dict:
        return {**self.metrics, "n_sequences": int(len(self.nll))}


def detect_mode(model) -> str:
    """``"mlm"`` for a masked-LM head (class name contains ``MaskedLM``), else ``"clm"``."""
    names = [cls.__name__ for cls in type(model).__mro__]
    return "mlm" if any("MaskedLM" in n for n in names) else "clm"


def _texts_for(model, tokenizer, ids: torch.Tensor):
    """A context in which a patched model with ``strength="auto"`` sees the raw texts of the batch
    (``PatchHandle.texts``); a no-op for any other model."""
    try:
        from ..patching import get_handle

        handle = get_handle(model)
    except Exception:  # not a patched transformers model
        handle = None
    auto = handle is not None and any(getattr(c, "strength", None) == "auto" for c in handle.configs)
    if auto and tokenizer is not None:
        return handle.texts(tokenizer.batch_decode(ids, skip_special_tokens=True))
    return contextlib.nullcontext()


@torch.no_grad()
def score_blocks(model, blocks: torch.Tensor, mode: str | None = None, batch_size: int = 16,
                 tokenizer=None, mask_seed: int = 0, progress=None) -> Scores:
    """Score ``blocks`` (``[N, L]`` token ids, no padding). ``tokenizer`` is needed for ``mlm``."""
    mode = mode or detect_mode(model)
    if mode not in ("clm", "mlm"):
        raise ValueError(f"mode must be 'clm' or 'mlm', got {mode!r}")
    if mode == "mlm" and (tokenizer is None or tokenizer.mask_token_id is None):
        raise ValueError("masked-LM scoring needs a tokenizer with a [MASK] token")
    model.eval()
    device = next(model.parameters()).device
    nll_seq, count_seq, correct_seq, token_nll = [], [], [], []
    for start in range(0, blocks.shape[0], batch_size):
        ids = blocks[start:start + batch_size]
        inputs, labels = lm_inputs(ids, mode, tokenizer, seed=mask_seed + start)
        with _texts_for(model, tokenizer, ids):
            logits = model(input_ids=inputs.to(device), attention_mask=torch.ones_like(inputs).to(device)).logits
        logits = logits.float().cpu()
        if mode == "clm":
            logits, labels = logits[:, :-1], labels[:, 1:]
        scored = labels != -100
        rows = scored.nonzero()[:, 0]  # the sequence of each scored token
        picked, gold = logits[scored], labels[scored]  # [T, V], [T]: only scored positions (memory)
        nll = (torch.logsumexp(picked, -1) - picked.gather(-1, gold.unsqueeze(-1)).squeeze(-1)).double()
        hit = picked.argmax(-1) == gold
        n = ids.shape[0]
        nll_seq.append(torch.zeros(n, dtype=torch.float64).index_add_(0, rows, nll).numpy())
        count_seq.append(scored.sum(1).numpy())
        correct_seq.append(torch.zeros(n, dtype=torch.long).index_add_(0, rows, hit.long()).numpy())
        token_nll.append(nll.numpy())
        if progress is not None:
            progress(int(ids.shape[0]))
    count, correct = np.concatenate(count_seq).astype(np.int64), np.concatenate(correct_seq).astype(np.int64)
    losses = np.concatenate(token_nll)
    if losses.size == 0:
        raise ValueError("no tokens to score: every block needs a token to predict (causal LM: two tokens or more)")
    total, n = losses.sum(), losses.size  # the sum of the tokens' losses, not of the per-sequence sums
    metrics = {"cross_entropy": float(get_metric("cross_entropy")(total, n)),
               "perplexity": float(get_metric("perplexity")(total, n)), "n_tokens": int(n),
               "accuracy": float(get_metric("token_accuracy")(correct.sum(), count.sum()))}
    return Scores(np.concatenate(nll_seq), count, correct, metrics)
