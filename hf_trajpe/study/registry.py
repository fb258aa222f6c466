"""The study suites by name, and the loading of a study YAML into its suite's config. A YAML names its
suite with ``suite:``; one without the key is read by the rule from before suites had names (a ``tasks:``
section: the task study, else the content study). A new kind of study adds its suite to :data:`SUITES`."""

from __future__ import annotations

from pathlib import Path

from ..training.config import ConfigError
from ..training.typed_config import from_dict
from .config import read_study_data
from .content import ContentSuite
from .extension import ExtensionSuite
from .suite import Suite
from .tasks import TaskSuite

__all__ = ["SUITES", "get_suite", "load_study_config", "suite_of"]

SUITES: dict[str, Suite] = {s.name: s for s in (ContentSuite(), TaskSuite(), ExtensionSuite())}


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


def _suite_name(data: dict) -> str:
    if "suite" in data:
        return data.pop("suite")
    return "tasks" if "tasks" in data else "content"


def load_study_config(path: str | Path, quick: bool = False, overrides: list[str] | None = None):
    """Read a study YAML into its suite's config, checked; ``quick`` applies its ``quick:`` overrides,
    then ``overrides``."""
    if quick:  # the file's values first: its quick profile would otherwise replace a bad one unchecked
        data = read_study_data(path, False, overrides)
        try:
            from_dict(get_suite(_suite_name(data)).config, data).validate()
        except ConfigError as err:
            raise ConfigError(f"{path}: {err} (checked before --quick replaces it)") from None
    data = read_study_data(path, quick, overrides)
    try:
        return from_dict(get_suite(_suite_name(data)).config, data).validate()
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
