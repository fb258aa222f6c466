"""A YAML mapping onto typed dataclasses, with named errors: the parser of both the experiment config
(:mod:`hf_trajpe.training.config`) and the study config (:mod:`hf_trajpe.study.config`).

Every unknown key raises :class:`ConfigError` naming the dotted key, the closest valid one and the
valid keys; every mistyped value names its key. ``key=value`` overrides with dotted keys are applied to
the raw mapping before it is parsed, so an override is checked exactly like the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing

__all__ = ["ConfigError", "apply_overrides", "from_dict", "suggest"]


class ConfigError(ValueError):
    """A config key or value is wrong; the message names the dotted key."""


def suggest(name: str, valid) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``valid``, or ``""``."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp)).replace("NoneType", "null")


def _coerce(value, tp, where: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        if isinstance(value, dict):  # ``Section | None``: the section's own error names the nested key
            sections = [a for a in args if dataclasses.is_dataclass(a)]
            if len(sections) == 1:
                return from_dict(sections[0], value, where)
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: expected {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return from_dict(tp, value, where)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported field type {tp}")


def from_dict(cls, data: dict, where: str = ""):
    """``cls(**data)`` with every value checked against the field's type; nested dataclasses recursively."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        dotted = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise ConfigError(f"unknown config key {dotted!r}{suggest(str(key), fields)}; "
                              f"valid keys{' of ' + where if where else ''}: {', '.join(fields)}")
        kwargs[key] = _coerce(value, hints[key], dotted)
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"missing config key(s) {[f'{where}.{m}' if where else m for m in missing]}")
    return cls(**kwargs)


#: an exponent without a dot (``1e-4``), which PyYAML reads as a string
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """``["train.max_steps=20", "encoding.name=rope"]`` applied to a raw config dict (values parsed as
    YAML: ``20`` is an int, ``0.3`` a float, ``null`` None, ``[a, b]`` a list)."""
    import copy

    import yaml

    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value (e.g. train.max_steps=20)")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw != "" else ""
        if isinstance(value, str) and _FLOAT.fullmatch(raw.strip()):
            value = float(raw)  # 1e-4: a number in YAML 1.2 and to anyone typing it, a string to PyYAML (YAML 1.1)
        node = data
        parts = key.strip().split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {'.'.join(parts[:i + 1])} is not a mapping")
            node = child
        node[parts[-1]] = value
    return data
