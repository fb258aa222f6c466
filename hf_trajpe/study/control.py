"""Why a model can "improve" on random content: the diagnosis behind the control (docs/spec.md, section 4.5).

On ``random_content`` (characters drawn uniformly from an alphabet of ``k`` tokens) the best possible
perplexity is ``k``, whatever the position encoding. A model above that floor loses in two ways,
measured here: probability it puts on tokens outside the alphabet (it has not yet learned that a
random context only continues with alphabet tokens), and non-uniformity inside the alphabet. Both
are calibration, and shrink with training; neither is position. A model *below* the floor means
the harness is broken (a leak, or test data the model has seen).
"""

from __future__ import annotations

import math

import torch

__all__ = ["random_control"]


@torch.no_grad()
def random_control(model, stream: list[int], alphabet_ids: list[int], block_size: int, n_blocks: int = 32,
                   early: int = 16, batch_size: int = 16) -> dict:
    """Perplexity against the floor ``len(alphabet_ids)``, the probability mass on the alphabet, the
    perplexity within the alphabet (renormalised), and the perplexity after the first ``early``
    positions of each block (how much is the model's slowness to recognise random context)."""
    n = min(n_blocks, len(stream) // block_size)
    if n == 0:
        raise ValueError(f"random-content stream of {len(stream)} tokens is shorter than one block of {block_size}")
    ids = torch.tensor(stream[: n * block_size]).view(n, block_size)
    alphabet = torch.tensor(sorted(set(alphabet_ids)))
    model.eval()
    device = next(model.parameters()).device
    nll, mass = [], []
    for start in range(0, n, batch_size):
        x = ids[start:start + batch_size].to(device)
        logp = model(input_ids=x).logits.float().log_softmax(-1)[:, :-1].cpu()
        gold = ids[start:start + batch_size, 1:]
        nll.append(-logp.gather(-1, gold[..., None]).squeeze(-1))
        mass.append(logp[..., alphabet].exp().sum(-1))
    nll_t, mass_t = torch.cat(nll).double(), torch.cat(mass).double()
    return {
        "floor": len(alphabet),
        "perplexity": math.exp(nll_t.mean().item()),
        "alphabet_mass": mass_t.mean().item(),
        "perplexity_within_alphabet": math.exp((nll_t + mass_t.log()).mean().item()),
        f"perplexity_after_{early}": math.exp(nll_t[:, early:].mean().item()),
        "n_tokens": int(nll_t.numel()),
    }
