"""An option that an encoding declares for itself: its name, default, check, help, and where it is saved.

Every option of :func:`hf_trajpe.patch` beyond the few that every encoding shares (``max_positions``,
``layers``) is declared by the scheme or position source that reads it, as a tuple of :class:`Option`
(``Scheme.options``, ``PositionSource.options``); ``PatchConfig`` keeps their values in one mapping and
refuses an option that the chosen encoding (and its base) does not declare. Two declarers may share an
option (the same :class:`Option` object): it is then taken by both.

Where ``hf_trajpe_config.json`` keeps a value (``saved``):

- ``"scheme_options"``: inside the file's ``scheme_options`` object, every declared option filled in (the
  place of every option declared since that object exists),
- ``"top"``: a top-level key of every file, at its default where the encoding does not take it (the options
  of format 1, whose files have always carried them),
- ``"top_if_set"``: a top-level key when not ``None`` (options that joined format 1 later, left out when unset
  so that older files stay as they were),
- ``"scheme_options_if_set"``: inside ``scheme_options`` when it differs from its default (an option that joined
  a scheme later, left out at its default so that the files and patch descriptions written before it stay as
  they were),
- ``"no"``: not saved (a reload gets the default).

Top-level keys are a closed set (:data:`TOP_LEVEL_KEYS`, in the order files have always been written): a new
option is saved in ``scheme_options``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Option", "SAVED", "TOP_LEVEL_KEYS", "declare_options", "boolean", "is_number"]

#: where the saved file keeps an option's value (module docstring)
SAVED = ("scheme_options", "top", "top_if_set", "scheme_options_if_set", "no")
#: the top-level keys of ``hf_trajpe_config.json``, in the order they are written (``encoding``, ``max_positions``,
#: ``layers`` and ``version`` are ``PatchConfig``'s own; the others are options saved ``top`` or ``top_if_set``)
TOP_LEVEL_KEYS = ("encoding", "base", "strength", "learnable_strength", "beta", "interpolation", "detach", "cache",
                  "cache_size", "extend", "max_positions", "rope_theta", "sinusoid_scale", "rope_parameters",
                  "rotary_fraction", "layers", "scheme_options", "version")
#: owner (scheme or position source) -> the options it declared when registered: an option name shared by two
#: owners must be the same declaration (which options are in force is read from the registries themselves:
#: ``encodings.declared_options``)
_DECLARED: dict[str, tuple[Option, ...]] = {}


def _accept(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Option:
    """One option of an encoding.

    - ``name``: the keyword of ``hf_trajpe.patch`` (and the attribute of ``PatchConfig``).
    - ``default``: the value where it is not given.
    - ``type``: the values it takes, in words (the option tables of docs/patching.md).
    - ``help``: what it does, one sentence.
    - ``check``: the value validated and normalised (``5`` -> ``5.0``); raises ``ValueError`` or ``TypeError``
      naming the option and what it takes. Checks that involve two options belong to the declarer's
      ``check_values``.
    - ``saved``: where the saved file keeps it (:data:`SAVED`, module docstring).
    - ``format_version``: the file format version a file that sets it (to a value other than the default) needs.
    - ``refusal``: how to refuse it where the encoding does not take it, a template with ``{name}``, ``{takers}``
      (the encodings that take it) and ``{desc}`` (the patch asked for); ``None``: the common wording
      ``option(s) ... apply only to {takers}, not {desc}``.
    """

    name: str
    default: Any
    type: str
    help: str
    check: Callable[[Any], Any] = _accept
    saved: str = "scheme_options"
    format_version: int = 1
    refusal: str | None = None

    def __post_init__(self) -> None:
        if self.saved not in SAVED:
            raise ValueError(f"option {self.name!r}: saved must be one of {', '.join(SAVED)}, got {self.saved!r}")
        if self.saved.startswith("top") and self.name not in TOP_LEVEL_KEYS:
            raise ValueError(f"option {self.name!r}: the top level of the saved file holds only the options it has "
                             "always held; save a new option in scheme_options (saved='scheme_options')")
        if self.saved == "top_if_set" and self.default is not None:
            raise ValueError(f"option {self.name!r}: saved='top_if_set' leaves the option out when None, so its "
                             f"default must be None, not {self.default!r}")

    def is_set(self, value: Any) -> bool:
        """Whether ``value`` differs from the default (exactly: ``0`` is not ``False``)."""
        return not (type(value) is type(self.default) and value == self.default)


def declare_options(owner: str, options: tuple[Option, ...]) -> None:
    """Check and record the options of a scheme or position source named ``owner`` (at its registration): a
    tuple of :class:`Option`, each name once, and an option name that another owner declares must be the same
    declaration (share the ``Option`` object)."""
    if not isinstance(options, tuple) or not all(isinstance(o, Option) for o in options):
        raise ValueError(f"{owner} must declare its options as a tuple of Option")
    names = [o.name for o in options]
    if len(set(names)) != len(names):
        raise ValueError(f"{owner} declares an option twice: {names}")
    for option in options:
        for other, theirs in _DECLARED.items():
            clash = next((o for o in theirs if o.name == option.name and o != option), None)
            if other != owner and clash is not None:
                raise ValueError(f"{owner} declares option {option.name!r} differently from {other}; share the "
                                 "same Option")
    _DECLARED[owner] = options


# -- checks shared by declarations ------------------------------------------------------------------------
def is_number(value: Any) -> bool:
    """A finite int or float (``True`` is not a number here)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def boolean(name: str) -> Callable[[Any], bool]:
    """The check of an on/off option: ``True`` or ``False`` only (``1`` is refused)."""

    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
        return value

    return check
