"""Position sources as encodings: encodings that compute the positions a base scheme reads, instead of integer
ranks (trajectory). A source declares its options as a scheme does (:class:`~.option.Option`); the options of
its base apply beside them (``rope_parameters`` for trajectory on ``rope``). Declaring one is a subclass of
:class:`PositionSource` decorated with :func:`register_source`; the positions themselves are computed at run
time by :mod:`hf_trajpe.patching.sources`.
"""

from __future__ import annotations

from typing import ClassVar

from .option import Option, declare_options
from .scheme import SCHEMES

__all__ = ["SOURCES", "PositionSource", "register_source"]

#: name -> position source, in registration order (after the schemes in the list of encodings)
SOURCES: dict[str, type[PositionSource]] = {}


class PositionSource:
    """An encoding that feeds its own positions to a base scheme (one that reads fractional positions)."""

    name: ClassVar[str]
    #: the options it reads, its base among them (``base_option``)
    options: ClassVar[tuple[Option, ...]] = ()
    #: the option naming the base scheme; its value ``None`` means the model's own scheme
    base_option: ClassVar[str] = "base"

    @classmethod
    def bases(cls) -> tuple[str, ...]:
        """The schemes it can feed: those that read fractional positions."""
        return tuple(n for n, c in SCHEMES.items() if c.fractional)

    @classmethod
    def check_values(cls, values: dict) -> dict:
        """Checks that involve several of its options (each one already checked alone); default: none."""
        return values


def register_source(cls: type[PositionSource]) -> type[PositionSource]:
    """Class decorator: make a position source known to :func:`hf_trajpe.patch` under ``cls.name``."""
    if cls.name in SCHEMES or (cls.name in SOURCES and SOURCES[cls.name] is not cls):
        raise ValueError(f"an encoding named {cls.name!r} is already registered")
    if cls.base_option not in {o.name for o in cls.options}:
        raise ValueError(f"position source {cls.__name__} must declare its base option {cls.base_option!r}")
    declare_options(cls.name, cls.options)
    SOURCES[cls.name] = cls
    return cls
