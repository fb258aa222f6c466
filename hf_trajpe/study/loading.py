"""The loading of a study YAML into its suite's config. A YAML names its suite with ``suite:``; one without the
key is read by the rule from before suites had names (a ``tasks:`` section: the task study, else the content
study). The file may name a ``base:`` file whose keys it deep-merges over (:func:`~.config.read_study_data`)."""

from __future__ import annotations

from pathlib import Path

import hf_trajpe.study.suites  # noqa: F401  (registers every suite; the package itself imports this module)

from ..training.config import ConfigError
from .config import read_study_data
from .registry import get_suite

__all__ = ["load_study_config"]


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
            get_suite(_suite_name(data)).config.load(path, data=data)
        except ConfigError as err:
            raise ConfigError(f"{err} (checked before --quick replaces it)") from None
    data = read_study_data(path, quick, overrides)
    try:
        config = get_suite(_suite_name(data)).config
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return config.load(path, data=data)
