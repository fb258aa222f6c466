"""Which floating-point type a long read runs in: ``float32``, ``bfloat16``, or ``auto``, measured per machine.

On CPUs with bfloat16 units (Intel AMX, AVX-512 BF16) a bfloat16 forward of a small Llama is several times
faster than float32; on CPUs without them bfloat16 is emulated and can be slower. So ``auto`` does not guess
from the CPU's name: it times the operations that dominate a long read (a projection matmul and causal
scaled-dot-product attention at a few thousand tokens) in both types, once per process, and picks bfloat16
only where it is clearly faster. On CUDA ``auto`` is bfloat16 where the card supports it. The calibration is
returned so that a result can say what was measured and chosen.
"""

from __future__ import annotations

import time
from functools import cache

import torch

__all__ = ["DTYPES", "MIN_SPEEDUP", "bfloat16_speedup", "resolve_dtype"]

#: names a caller may give, and the type each means (``auto`` is resolved by :func:`resolve_dtype`)
DTYPES: dict[str, torch.dtype | None] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "auto": None}
#: bfloat16 is chosen by ``auto`` only when the calibration is at least this much faster: below it, the
#: precision given up is not paid back
MIN_SPEEDUP = 1.5


def _time(fn, repeats: int) -> float:
    fn()  # warm-up (twice: the first bfloat16 call of a process compiles its kernels)
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _workload(dtype: torch.dtype, tokens: int, width: int, heads: int):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, width, generator=gen).to(dtype)
    w = torch.randn(width, 3 * width, generator=gen).to(dtype) / width ** 0.5
    q, k, v = (torch.randn(1, heads, tokens, width // heads, generator=gen).to(dtype) for _ in range(3))

    def run() -> None:
        with torch.inference_mode():
            x @ w
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


@cache
def bfloat16_speedup(tokens: int = 2048, width: int = 576, heads: int = 9, repeats: int = 3) -> float:
    """float32 time over bfloat16 time of one read's main operations on this CPU (SmolLM2-135M's width and heads
    by default), with this process's thread count: above 1, bfloat16 is faster. Cached per process."""
    f32 = _time(_workload(torch.float32, tokens, width, heads), repeats)
    bf16 = _time(_workload(torch.bfloat16, tokens, width, heads), repeats)
    return f32 / bf16


def resolve_dtype(requested: str | torch.dtype, device: str | torch.device = "cpu") -> tuple[torch.dtype, dict]:
    """The type to read in, and how it was chosen (``{"requested", "dtype", "speedup"?, "reason"}``)."""
    if isinstance(requested, torch.dtype):
        requested = str(requested).removeprefix("torch.")
    if requested not in DTYPES:
        raise ValueError(f"dtype {requested!r} is not one of {', '.join(DTYPES)}: float32 reads exactly as the "
                         "published results, bfloat16 is faster on CPUs with bfloat16 units, auto measures which")
    if DTYPES[requested] is not None:
        return DTYPES[requested], {"requested": requested, "dtype": requested, "reason": "as requested"}
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return (torch.bfloat16 if ok else torch.float32), {
            "requested": "auto", "dtype": "bfloat16" if ok else "float32",
            "reason": "CUDA card with bfloat16" if ok else "CUDA card without bfloat16"}
    speedup = bfloat16_speedup()
    chosen = torch.bfloat16 if speedup >= MIN_SPEEDUP else torch.float32
    name = str(chosen).removeprefix("torch.")
    return chosen, {"requested": "auto", "dtype": name, "speedup": round(speedup, 3),
                    "reason": f"bfloat16 measured {speedup:.2f}x float32 on this CPU "
                              f"({'at least' if chosen is torch.bfloat16 else 'below'} {MIN_SPEEDUP}x)"}
