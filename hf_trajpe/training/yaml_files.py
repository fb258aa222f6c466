"""Reading config YAML files: :func:`read_yaml` (one file, errors naming it) and :func:`read_config_file`,
which resolves a ``base:`` key so that a family of experiments keeps its shared sections in one base file
and each experiment only what differs (``base: base/tiny.yaml``, relative to the file that names it).
The file's keys go over its base's, section by section (mappings merge, any other value replaces; a mapping
tagged ``!replace`` replaces the base's whole, so a file can also drop keys of its base); a base may have its
own base. A missing base or a cycle of bases is an error naming the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .typed_config import ConfigError

__all__ = ["BASE_KEY", "REPLACE_TAG", "Replace", "merge", "read_config_file", "read_yaml"]

BASE_KEY = "base"
#: the YAML tag of a mapping that replaces its base's mapping instead of merging into it
REPLACE_TAG = "!replace"


class Replace(dict):
    """A mapping tagged ``!replace``: :func:`merge` puts it in place of the base's, not over it."""


def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def replace(loader, node):
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, f"{REPLACE_TAG} tags a mapping, not this value",
                                                    node.start_mark)
        return Replace(loader.construct_mapping(node, deep=True))

    Loader.add_constructor(REPLACE_TAG, replace)
    return Loader


def _plain(value):
    """``value`` with every :class:`Replace` turned into a plain ``dict`` (what the file means once merged)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read_yaml(path: str | Path) -> Any:
    """The YAML document of ``path`` (``{}`` when empty); a :class:`ConfigError` naming the file when it is
    not UTF-8 text or not YAML."""
    import yaml

    try:
        return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_loader()) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save the file as "
                          "UTF-8") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}; fix the syntax there") from None


def merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``: nested mappings merged key by key (unless tagged ``!replace``), anything else
    replaced."""
    out = _plain(base)
    for key, value in over.items():
        mergeable = isinstance(value, dict) and not isinstance(value, Replace) and isinstance(out.get(key), dict)
        out[key] = merge(out[key], value) if mergeable else _plain(value)
    return out


def read_config_file(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict:
    """The mapping of a config file with its ``base:`` chain resolved."""
    path = Path(path)
    chain = (*_chain, path.resolve())
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, got {type(data).__name__}")
    if BASE_KEY not in data:
        return _plain(data)
    base = data.pop(BASE_KEY)
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: base: the path of a base config file (relative to this file), got {base!r}")
    base_path = path.parent / base
    if base_path.resolve() in chain:
        cycle = " -> ".join(str(p) for p in (*chain, base_path.resolve()))
        raise ConfigError(f"{path}: base: the base files form a cycle ({cycle}); one of them must not name a base")
    if not base_path.is_file():
        raise ConfigError(f"{path}: base: {base!r} does not exist (looked for {base_path})")
    return merge(read_config_file(base_path, chain), data)
