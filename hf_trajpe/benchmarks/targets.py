"""The cost targets (docs/spec.md, section 6) and which measured variants they bound.

Read by the benchmarks, which give the variants with a target more rounds until their verdict is decided
(timing.side_by_side), and by the suite, which checks them (suite.check_targets).
"""

from __future__ import annotations

__all__ = ["BASE_OF", "ENCODING_TARGET_VARIANTS", "TARGETS", "limits_for"]

#: name -> (limit, what it bounds)
TARGETS = {
    "train_step": (1.03, "training step time, trajectory / stock"),
    "decode_per_token": (1.03, "per-token decode time (KV cache), trajectory / stock"),
    "memory": (1.05, "peak memory of a training step, trajectory / stock"),
    "encoding": (2.0, "trajectory positions + encoding / sinusoidal table lookup"),
}
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
