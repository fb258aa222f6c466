"""What differs between the transformers versions hf_trajpe supports, in one place.

The tested window is :data:`TESTED_TRANSFORMERS` (oldest and newest release the test suite passed on,
``make test-compat``); ``pyproject.toml`` requires at least its oldest end and caps nothing (installing
hf_trajpe never downgrades a newer release), ``constraints.txt`` pins its newest. :func:`check_transformers_version`
warns once when :func:`hf_trajpe.patch` meets a release outside it (users may try; the warning says what
was tested).

Differences handled here, with the release that made them:

- 5.24: the KV cache argument of every model's ``forward`` is ``cache`` (``past_key_values`` still works,
  with a deprecation warning, until 5.40), and outputs carry ``.cache`` (``.past_key_values`` is a
  warning property). :func:`cache_kwarg`, :func:`cache_from_kwargs` and :func:`output_cache` read and
  pass it by the name the installed release uses, so the project's own calls trigger no warning.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from functools import lru_cache

__all__ = [
    "TESTED",
    "TESTED_TRANSFORMERS",
    "cache_kwarg",
    "cache_from_kwargs",
    "output_cache",
    "check_transformers_version",
    "transformers_version",
    "version_tuple",
]

#: the oldest and newest release of each library the default test suite passes on (``make test-compat``:
#: one fresh environment with every oldest end, one with every newest); ``pyproject.toml`` requires
#: ``>=oldest`` and nothing more, ``constraints.txt`` pins ``newest`` (tests check that they agree)
TESTED: dict[str, tuple[str, str]] = {
    "transformers": ("5.23.0", "5.24.0"),
    "accelerate": ("1.14.0", "1.15.0"),
    "peft": ("0.21.0", "0.21.2"),
}
TESTED_TRANSFORMERS: tuple[str, str] = TESTED["transformers"]


def version_tuple(version: str) -> tuple[int, ...]:
    """``"5.24.0.dev0"`` -> ``(5, 24, 0)``: the numeric release part only."""
    parts = []
    for piece in version.split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.group() != piece:
            break
    return tuple(parts)


def transformers_version() -> str:
    import transformers

    return transformers.__version__


@lru_cache(maxsize=1)
def cache_kwarg() -> str:
    """The name of the KV cache argument of models' ``forward`` in the installed transformers (``cache``
    from 5.24, ``past_key_values`` before); read from Llama's signature on first use."""
    from transformers.models.llama.modeling_llama import LlamaModel

    return "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else "past_key_values"


def cache_from_kwargs(kwargs: dict):
    """The KV cache a caller passed to a model's ``forward``, under either name (``None`` if none)."""
    cache = kwargs.get("cache")
    return cache if cache is not None else kwargs.get("past_key_values")


@lru_cache(maxsize=64)
def _cache_field(output_type: type) -> str | None:
    """The field of an output dataclass that holds the KV cache, or ``None`` (read once per output class: every
    generated token's forward asks)."""
    names = {f.name for f in dataclasses.fields(output_type)}
    return next((name for name in ("cache", "past_key_values") if name in names), None)


def output_cache(output):
    """The KV cache of a model output (``.cache`` from 5.24, ``.past_key_values`` before), read without the
    deprecation warning of the old name; a tuple output's second item if it is a cache; else ``None``."""
    if dataclasses.is_dataclass(output):
        name = _cache_field(type(output))
        return getattr(output, name) if name is not None else None
    if isinstance(output, tuple) and len(output) > 1 and hasattr(output[1], "get_seq_length"):
        return output[1]
    return None


_warned: set[str] = set()


def check_transformers_version() -> None:
    """Warn once per process when the installed transformers lies outside :data:`TESTED_TRANSFORMERS`."""
    version = transformers_version()
    if version in _warned:
        return
    low, high = (version_tuple(v) for v in TESTED_TRANSFORMERS)
    have = version_tuple(version)
    # a newer patch release of the newest tested minor is outside too: nothing after the newest tested one
    if low <= have <= high:
        return
    _warned.add(version)
    warnings.warn(
        f"hf_trajpe was tested with transformers {TESTED_TRANSFORMERS[0]} to {TESTED_TRANSFORMERS[1]}; this "
        f"environment has {version}. Patching may work, but results are not checked there: install a tested "
        f"release (pip install 'transformers>={TESTED_TRANSFORMERS[0]},<={TESTED_TRANSFORMERS[1]}') or run "
        "'make test-compat' to test this one",
        UserWarning,
        stacklevel=3,
    )
