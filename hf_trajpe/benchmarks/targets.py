"""The cost targets (docs/spec.md, section 6) and which measured variants they bound.

Read by the benchmarks, which give the variants with a target more rounds until their verdict is decided
(timing.side_by_side), and by the suite, which checks them (suite.check_targets).
"""

from __future__ import annotations

__all__ = ["BASE_OF", "COUNTED", "ENCODING_TARGET_VARIANTS", "TARGETS", "limits_for"]

#: name -> (limit, what it bounds); a limit of ``None``: measured and reported with its interval, bound by nothing.
#: The remaps' limits are those of their own benchmark (``remap.LIMITS``: two attention passes are inherent)
TARGETS: dict[str, tuple[float | None, str]] = {
    "train_step": (1.03, "training step time, trajectory / stock"),
    "decode_per_token": (1.03, "per-token decode time (KV cache), trajectory / stock"),
    "memory": (1.05, "peak memory of a training step, trajectory / stock"),
    "encoding": (2.0, "trajectory positions + encoding / sinusoidal table lookup"),
    # the aims of ALiBi at long context (docs/benchmarks.md, "alibi")
    "alibi_time": (1.2, "aim: forward time at long context, ALiBi / stock SDPA"),
    "alibi_memory": (1.15, "aim: peak memory of a forward at long context, ALiBi / stock SDPA"),
    "remap_time": (2.5, "prefill time past the trained length, remap / stock SDPA"),
    "remap_decode": (1.2, "per-token decode time past the trained length, remap / stock SDPA"),
    "remap_memory": (1.5, "peak memory of a prefill past the trained length, remap / stock SDPA"),
}
#: targets that are counted (deterministic peaks: no interval), not timed
COUNTED = ("memory", "alibi_memory", "remap_memory")
#: the encoding a trajectory variant evaluates at its positions: its own cost against stock, for context;
#: the keys are the model variants held to the targets
BASE_OF = {"trajectory/learned": "native", "trajectory/sinusoidal": "sinusoidal", "trajectory/rope": "rope",
           "trajectory/alibi": "alibi",
           # static context extensions are held to the same limits: their frequencies are fixed at patch time
           "rope+yarn x2": "rope", "rope+ntk x2": "rope"}
#: encoding-benchmark variants the 2x target applies to (the two ways to evaluate a sinusoid)
ENCODING_TARGET_VARIANTS = ("trajectory + sinusoidal exact", "trajectory + sinusoidal table (linear)")


def limits_for(target: str, variants) -> dict[str, float]:
    """``{variant: limit}`` for the ``variants`` that ``target`` bounds."""
    limit = TARGETS[target][0]
    bounded = ENCODING_TARGET_VARIANTS if target == "encoding" else BASE_OF
    return {v: limit for v in variants if v in bounded}
