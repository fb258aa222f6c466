"""The study suites by name. Each suite's folder under :mod:`hf_trajpe.study.suites` registers its suite here
with :func:`register_suite` when it is imported (``hf_trajpe.study`` imports them all); a study YAML names its
suite with ``suite:`` (:mod:`.loading`)."""

from __future__ import annotations

from ..training.config import ConfigError
from .suite import Suite

__all__ = ["SUITES", "get_suite", "register_suite", "suite_of"]

#: suite name -> the suite, in the order the suites were registered
SUITES: dict[str, Suite] = {}


def register_suite(cls: type) -> type:
    """Class decorator: register an instance of the suite ``cls`` under its ``name`` (one suite per name)."""
    suite = cls()
    if suite.name in SUITES and type(SUITES[suite.name]) is not cls:
        raise ValueError(f"suite {suite.name!r} is registered already ({type(SUITES[suite.name]).__name__}); "
                         "give the new suite another name")
    SUITES[suite.name] = suite
    return cls


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"suite: {name!r} is not one of the study suites {sorted(SUITES)}") from None


def suite_of(cfg) -> Suite:
    """The suite whose config ``cfg`` is."""
    for suite in SUITES.values():
        if type(cfg) is suite.config:
            return suite
    raise TypeError(f"{type(cfg).__name__} is not the config of any study suite ({sorted(SUITES)})")
