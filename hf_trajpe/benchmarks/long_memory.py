"""Peak GPU memory of a bf16 training step at long lengths (8k-32k tokens), patched against stock.

The model-level memory benchmark (memory.py) runs at 512 tokens, where attention's ``n x n`` terms are
small. Here the lengths are long enough for them to dominate: ALiBi's bias reaches SDPA as a float mask
``[b, h, n, n]`` (materialised, and SDPA's fused kernels are lost), while FlexAttention computes the bias
per block from a ``score_mod``. Stock is the same model on SDPA's causal kernel. CUDA only: the peak is
``torch.cuda.max_memory_allocated`` over the step, weights and gradients included.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .alibi import FLEX, with_flex
from .setup import SIZES, build_model, patched, random_ids

__all__ = ["LONG_VARIANTS", "long_training_peaks"]

#: the variants measured: ALiBi and trajectory on its float mask (sdpa) and through flex, trajectory over RoPE
LONG_VARIANTS = ("alibi", "alibi" + FLEX, "trajectory/alibi" + FLEX, "trajectory/rope")


def long_training_peaks(size: str = "default", tokens: Sequence[int] = (8192, 32768),
                        variants: Sequence[str] = LONG_VARIANTS, device: str = "cuda") -> list[dict[str, object]]:
    """One row per length and variant: the step's peak bytes and its ratio to stock's."""
    if not torch.device(device).type == "cuda":
        raise ValueError(f"peak GPU memory needs a CUDA device, got {device!r}")
    rows = []
    for n in tokens:
        model = build_model("llama", SIZES[size], device, torch.bfloat16, max_positions=n).train()
        ids = random_ids(model.config.vocab_size, n, device=device)
        context = with_flex(model, patched(model))

        _peak(model, ids, device)  # warm-up: one-time allocations are not the patch's
        stock = _peak(model, ids, device)
        for label in variants:
            with context(label):
                _peak(model, ids, device)  # warm-up under this variant (flex compiles its kernels per shape)
                value = _peak(model, ids, device)
            rows.append({"size": size, "tokens": n, "variant": label, "stock_bytes": stock, "peak_bytes": value,
                         "ratio": value / stock})
        model, ids = None, None
        torch.cuda.empty_cache()
    return rows


def _peak(model: torch.nn.Module, ids: torch.Tensor, device: str) -> int:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)
