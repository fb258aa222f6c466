"""``FamilyAdapter``: where one model family keeps its positions, and what it can therefore carry."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from ..schemes import NATIVE, SCHEMES, SOURCES
from ..types import StepState

__all__ = ["FamilyAdapter"]


@dataclass(frozen=True)
class FamilyAdapter:
    """How one model family exposes its positions. Paths are relative to ``model.base_model``.

    - ``native``: the family's own scheme, ``"learned"`` (absolute table at ``table_path``) or ``"rope"``
      (module at ``rotary_path``).
    - ``self_attention``: class names of the self-attention modules that go through transformers'
      attention-function interface (they get biases and rotations).
    - ``table_offset``: first table row of position 0 (RoBERTa: ``pad_token_id + 1``).
    - ``token_type_ids``: the base model wants explicit zeros when called with ``inputs_embeds``.
    - ``causal``: whether a model of this family (given its config) attends causally.
    - ``runner_path``: where the forward hooks go, when not on the base model itself.
    """

    name: str
    model_types: tuple[str, ...]
    native: str
    self_attention: tuple[str, ...]
    table_path: str | None = None
    rotary_path: str | None = None
    token_type_ids: bool = False
    table_offset: Callable[[object], int] = staticmethod(lambda config: 0)
    causal: Callable[[object], bool] = staticmethod(lambda config: True)
    #: module that defines the family's stock ``eager_attention_forward`` (default: the base model's)
    attention_module: str | None = None
    #: path of the module whose forward takes ``input_ids`` and the mask, if not the base model (OPT's
    #: LM head calls ``model.decoder`` directly)
    runner_path: str = ""

    @property
    def provides(self) -> frozenset[str]:
        """What the engine can hook into: a position ``table``, a ``rotary`` module, ``attention`` functions."""
        out = set()
        if self.table_path:
            out.add("table")
        if self.rotary_path:
            out.add("rotary")
        if self.self_attention:
            out.add("attention")
        return frozenset(out)

    @property
    def takes_layers(self) -> bool:
        """Whether a patch can take a layer selection here: the family's own encoding acts inside every attention
        layer, through a shared rotary module whose ``(cos, sin)`` each layer receives (docs/patching.md,
        "Layer selections"), and its self-attention goes through transformers' attention interface."""
        return bool(self.rotary_path and self.self_attention)

    @property
    def trajectory_bases(self) -> tuple[str, ...]:
        """Schemes this family can carry that read fractional positions."""
        return tuple(n for n, c in SCHEMES.items() if c.fractional and c.supported_by(self.provides))

    @property
    def encodings(self) -> tuple[str, ...]:
        """What ``hf_trajpe.patch`` accepts for this family, from the schemes' declared needs."""
        own = tuple(n for n, c in SCHEMES.items() if c.selectable and c.supported_by(self.provides))
        return (NATIVE, *own, *(SOURCES if self.trajectory_bases else ()))

    def eager_attention(self, base: nn.Module) -> Callable:
        """The family's stock eager attention function (wrapped when biases or rotations go inside)."""
        return importlib.import_module(self.attention_module or type(base).__module__).eager_attention_forward

    def install(self, model: nn.Module, state: StepState) -> list[Callable[[], None]]:
        """Put in place what the engine cannot (an override whose positions live in the model's own code:
        GPT-J's sin/cos buffers, BLOOM's and MPT's ALiBi builders); returns the steps that undo it, run
        in reverse by ``unpatch``. Called last by ``hf_trajpe.patch``, so hooks added here run after the
        engine's. Default: nothing."""
        return []
