"""Reading config YAML files: :func:`read_yaml` (one file, errors naming it) and :func:`read_config_file`,
which resolves a ``base:`` key so that a family of experiments keeps its shared sections in one base file
and each experiment only what differs (``base: base/tiny.yaml``, relative to the file that names it).
The file's keys go over its base's, section by section (mappings merge, any other value replaces); a base may
have its own base. A missing base or a cycle of bases is an error naming the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .typed_config import ConfigError

__all__ = ["BASE_KEY", "merge", "read_config_file", "read_yaml"]

BASE_KEY = "base"


def read_yaml(path: str | Path) -> Any:
    """The YAML document of ``path`` (``{}`` when empty); a :class:`ConfigError` naming the file when it is
    not UTF-8 text or not YAML."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save the file as "
                          "UTF-8") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}; fix the syntax there") from None


def merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``: nested mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_config_file(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict:
    """The mapping of a config file with its ``base:`` chain resolved."""
    path = Path(path)
    chain = (*_chain, path.resolve())
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, got {type(data).__name__}")
    if BASE_KEY not in data:
        return data
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
