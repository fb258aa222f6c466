"""Inputs and labels of a batch of token blocks, for training and scoring alike: :func:`lm_inputs`.

- Causal LM: the labels are the inputs (the model, or the scorer, shifts them by one).
- Masked LM, training (:func:`mask_tokens`): BERT's masking, each non-special token chosen with
  probability ``p``, of those 80% ``[MASK]``, 10% a random token, 10% unchanged; drawn from a seed, so a
  resumed run masks exactly as the uninterrupted one.
- Masked LM, scoring (:func:`mask_blocks`): exactly 15% of each block's non-special tokens (at least
  one), all ``[MASK]``, positions drawn from ``(seed, row)``: every model is scored on the same masks.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["MASK_RATE", "lm_inputs", "mask_blocks", "mask_tokens"]

MASK_RATE = 0.15


def lm_inputs(blocks: torch.Tensor, task: str, tokenizer=None, seed: int = 0,
              mlm_probability: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)`` of ``blocks`` (``[N, L]`` token ids) for ``task`` ``clm`` or ``mlm``.

    Masked LM: ``mlm_probability`` given, the training masking (:func:`mask_tokens`); ``None``, the
    scoring masking (:func:`mask_blocks`). Labels are -100 where nothing is predicted."""
    if task == "clm":
        return blocks, blocks
    if task != "mlm":
        raise ValueError(f"task must be 'clm' or 'mlm', got {task!r}")
    if tokenizer is None or tokenizer.mask_token_id is None:
        raise ValueError("masked LM needs a tokenizer with a [MASK] token")
    if mlm_probability is None:
        return mask_blocks(blocks, tokenizer.mask_token_id, tokenizer.all_special_ids, seed=seed)
    return mask_tokens(blocks, tokenizer, mlm_probability, seed)


def mask_tokens(input_ids: torch.Tensor, tokenizer, probability: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking (of the chosen positions: 80% ``[MASK]``, 10% a random token, 10% unchanged), drawn
    from ``seed`` so a resumed run masks exactly as the uninterrupted one. Returns ``(inputs, labels)``."""
    g = torch.Generator().manual_seed(seed)
    special = torch.isin(input_ids, torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=input_ids.dtype))
    chosen = (torch.rand(input_ids.shape, generator=g) < probability) & ~special
    labels = torch.where(chosen, input_ids, -100)
    inputs = input_ids.clone()
    u = torch.rand(input_ids.shape, generator=g)
    inputs[chosen & (u < 0.8)] = tokenizer.mask_token_id
    rand = chosen & (u >= 0.8) & (u < 0.9)
    inputs[rand] = torch.randint(len(tokenizer), input_ids.shape, generator=g)[rand]
    return inputs, labels


def mask_blocks(input_ids: torch.Tensor, mask_token_id: int, special_ids, seed: int = 0,
                rate: float = MASK_RATE) -> tuple[torch.Tensor, torch.Tensor]:
    """``(masked_ids, labels)``: labels are -100 except at the masked positions."""
    masked, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    special = torch.isin(input_ids, torch.tensor(sorted(set(special_ids)), dtype=input_ids.dtype))
    for b in range(input_ids.shape[0]):
        candidates = (~special[b]).nonzero().flatten().numpy()
        if len(candidates) == 0:
            continue
        k = max(1, int(round(rate * len(candidates))))
        pick = np.random.default_rng([seed, b]).choice(candidates, size=k, replace=False)
        pick = torch.as_tensor(pick)
        labels[b, pick] = input_ids[b, pick]
        masked[b, pick] = mask_token_id
    return masked, labels
