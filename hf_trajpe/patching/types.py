"""What the lower layers of patching read from the plan and the patch state, as Protocols: a scheme is
built from a plan, a family adapter installs against the state, a position source reads the state; the plan
and the state are built from schemes, families and sources. Naming the plan and the state by these small
types (instead of importing :class:`~.plan.PatchPlan` or :class:`~.state.PatchState`, even for type
hints only) keeps the modules below them free of imports back up."""

from __future__ import annotations

from typing import Any, Protocol

import torch

__all__ = ["DecodingMemoryView", "PlanView", "PositionState", "StepState"]


class PlanView(Protocol):
    """The resolved plan as a scheme reads it (:class:`~.plan.PatchPlan`)."""

    config: Any  # the PatchConfig
    family: Any  # the FamilyAdapter
    causal: bool
    attention_modules: int
    head_dim: int | None
    width: int
    interpolation: str | None
    max_positions: int | None
    table_offset: int
    sinusoid_scale: Any
    rope_scaling: Any  # the resolved rope_parameters extension (rope_scaling.RopeScaling) or None
    trained_length: int | None  # the rotation's trained length (rope_scaling's when given)


class StepState(Protocol):
    """The patch state as a family's own override reads it during a forward."""

    plan: PlanView
    scheme: Any  # the Scheme built for the model
    step: Any  # the current call's positions (StepInputs)


class DecodingMemoryView(Protocol):
    """What a position source reads from the memory kept between decoding steps."""

    num_real: torch.Tensor | None
    trajectory: Any  # TrajectoryPast | None


class PositionState(Protocol):
    """The patch state as a position source reads it (:class:`~.state.PatchState`)."""

    strength: Any  # a Strength, or AutoStrength
    call_texts: list[str] | None
    tokenizer: Any

    def trajectory_options(self) -> dict:
        """Keyword arguments of :func:`hf_trajpe.encodings.trajectory.trajectory_positions` for this patch."""

    def extension(self) -> float | None:
        """The content-aware extension factor of trajectory positions (``extend``), or ``None``."""

    def keeps_full_state(self) -> bool:
        """Whether decoding after this call needs the full trajectory state (a causal model)."""

    def position_limit(self) -> int | None:
        """The last position + 1 the model has, or None."""

    def report_clamped(self, count: int) -> None:
        """Count positions clamped at the limit (and warn once)."""
