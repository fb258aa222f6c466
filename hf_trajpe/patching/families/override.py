"""``OverrideAdapter``: the base of hand-written adapters for models whose positions live in their own code
(GPT-J's per-layer sin/cos buffers, BLOOM's and MPT's ALiBi built in the model's forward), where the
engine finds neither a module to replace nor an attention function to wrap.

Such an adapter says what it offers the plan (``offers``: ``rotary`` for a rotation it computes itself,
``attention`` for a bias it computes itself, which also makes the state keep every key's position
across decoding steps) and which schemes it carries (``carries``; the rest are refused by the plan
with the list). It puts its own pieces in place in :meth:`FamilyAdapter.install`: instance attributes
that shadow a method of the model's class, and forward hooks, each undone by ``unpatch``; classes
and module-level functions are never modified.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from ..schemes import NATIVE, SCHEMES, SOURCES
from .adapter import FamilyAdapter

__all__ = ["OverrideAdapter", "shadow_method"]


@dataclass(frozen=True)
class OverrideAdapter(FamilyAdapter):
    """A :class:`FamilyAdapter` whose positions are computed by the override itself (see the module docstring)."""

    #: what the override computes itself: ``rotary`` (a rotation) and/or ``attention`` (a score bias)
    offers: frozenset[str] = frozenset()
    #: the schemes it carries; others are refused even where ``offers`` would allow them
    carries: tuple[str, ...] = ()

    @property
    def provides(self) -> frozenset[str]:
        return self.offers

    @property
    def takes_layers(self) -> bool:
        """No: an override computes its positions in the model's own code, for all layers at once."""
        return False

    @property
    def trajectory_bases(self) -> tuple[str, ...]:
        return tuple(n for n in super().trajectory_bases if n in self.carries)

    @property
    def encodings(self) -> tuple[str, ...]:
        own = tuple(n for n, c in SCHEMES.items() if c.selectable and n in self.carries
                    and c.supported_by(self.provides))
        return (NATIVE, *own, *(SOURCES if self.trajectory_bases else ()))

    def eager_attention(self, base: nn.Module) -> None:
        """None: an override's attention is the model's own code, not transformers' attention functions."""
        return None


def shadow_method(module: nn.Module, name: str, fn: Callable) -> Callable[[], None]:
    """Shadow the class method ``name`` of this one ``module`` with ``fn`` (an instance attribute, so other
    instances and the class are untouched); returns the undo step."""
    if name in module.__dict__:
        raise RuntimeError(f"{type(module).__name__}.{name} is already replaced on this instance")
    module.__dict__[name] = fn
    return lambda: module.__dict__.pop(name, None)
