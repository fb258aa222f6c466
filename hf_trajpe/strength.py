"""Trajectory strength (alpha) as a fixed value, a learnable parameter, or ``"auto"`` (docs/spec.md, section 2).

:func:`check_strength_option` is the one check of a user's strength option; everything that takes one
(``PatchConfig``, :func:`make_strength`, the strength modules) calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from .checks import check_strength_value
from .content import detect_content_type

__all__ = ["AUTO_STRENGTHS", "FixedStrength", "LearnableStrength", "AutoStrength", "make_strength",
           "check_strength_option"]

#: docs/spec.md, section 2: per-content-type strength for ``"auto"``; any other type gets ``"default"``.
AUTO_STRENGTHS: Mapping[str, float] = {
    "code_hierarchy": 0.25,
    "dialogue_structure": 0.15,
    "random_content": 0.0,
    "default": 0.2,
}


class FixedStrength(nn.Module):
    """A constant alpha; stored as a buffer so it moves with the model and saves with it."""

    def __init__(self, value: float = 0.2) -> None:
        super().__init__()
        self.register_buffer("value", torch.tensor(check_strength_value(value)))

    def forward(self, batch_size: int, texts: Sequence[str] | None = None) -> torch.Tensor:
        return self.value

    def extra_repr(self) -> str:
        return f"value={float(self.value):g}"


class LearnableStrength(nn.Module):
    """alpha = sigmoid(raw): trainable and always inside (0, 1), so no clamping kills its gradient.

    ``raw`` has shape ``[1]``, not ``[]``: FSDP2's ``fully_shard`` refuses scalar parameters. A scalar
    ``raw`` saved by an older version loads (it is reshaped on load).
    """

    def __init__(self, init: float = 0.2) -> None:
        super().__init__()
        init = check_strength_option(init, learnable=True)
        self.raw = nn.Parameter(torch.tensor([math.log(init / (1.0 - init))], dtype=torch.float32))

    @property
    def value(self) -> torch.Tensor:
        return torch.sigmoid(self.raw).reshape(())

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        key = prefix + "raw"
        if key in state_dict and state_dict[key].dim() == 0:  # saved before raw became [1]
            state_dict[key] = state_dict[key].reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, batch_size: int, texts: Sequence[str] | None = None) -> torch.Tensor:
        return self.value

    def extra_repr(self) -> str:
        return f"value={float(self.value):.4f} (learnable)"


class AutoStrength(nn.Module):
    """Per-sequence alpha from the detected content type (``AUTO_STRENGTHS``).

    Needs the text of each sequence; without texts (nothing to detect from) it uses the default.
    """

    def __init__(
        self,
        table: Mapping[str, float] | None = None,
        detector: Callable[[str], str] = detect_content_type,
    ) -> None:
        super().__init__()
        self.table = dict(AUTO_STRENGTHS if table is None else table)
        if "default" not in self.table:
            raise ValueError("an auto-strength table needs a 'default' entry for undetected content")
        for key, v in self.table.items():
            check_strength_value(v)
            if not isinstance(key, str):
                raise TypeError(f"auto-strength table keys are content-type names, got {key!r}")
        self.detector = detector
        self.last_types: list[str] = []

    def strengths_for(self, texts: Sequence[str]) -> tuple[list[str], list[float]]:
        types = [self.detector(t) for t in texts]
        return types, [self.table.get(t, self.table["default"]) for t in types]

    def forward(self, batch_size: int, texts: Sequence[str] | None = None) -> torch.Tensor:
        if texts is None:
            self.last_types = ["unknown"] * batch_size
            return torch.tensor(self.table["default"])
        if len(texts) != batch_size:
            raise ValueError(f"auto strength got {len(texts)} texts for a batch of {batch_size}")
        self.last_types, values = self.strengths_for(texts)
        return torch.tensor(values, dtype=torch.float32)

    def extra_repr(self) -> str:
        return f"table={self.table}"


def make_strength(strength: float | str | nn.Module, learnable: bool = False) -> nn.Module:
    """``0.2`` -> fixed, ``0.2`` with ``learnable=True`` -> learnable, ``"auto"`` -> auto."""
    if isinstance(strength, nn.Module):
        return strength
    strength = check_strength_option(strength, learnable)
    if strength == "auto":
        return AutoStrength()
    return LearnableStrength(strength) if learnable else FixedStrength(strength)


def check_strength_option(strength: float | str, learnable: bool = False) -> float | str:
    """A user's ``strength`` option, validated: a number in [0, 1] (strictly inside when learnable: alpha
    is then a sigmoid) or ``"auto"`` (never learnable: it picks values per content type)."""
    if isinstance(strength, str):
        if strength != "auto":
            raise ValueError(f"strength must be a number in [0, 1] or 'auto', got {strength!r}")
        if learnable:
            raise ValueError("strength='auto' picks values per content type and cannot also be learnable")
        return strength
    value = check_strength_value(strength)
    if learnable and not 0.0 < value < 1.0:
        raise ValueError(
            f"a learnable strength must start strictly inside (0, 1) (it is a sigmoid), got {value}; "
            "use a fixed strength for exactly 0 or 1"
        )
    return value
