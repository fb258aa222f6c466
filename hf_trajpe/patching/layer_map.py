"""Layer maps: several encodings on disjoint layer selections of one model, given, saved and reloaded as one
value (``hf_trajpe.patch(model, {"every:4:3": "none", "top:2": {"encoding": "alibi"}})``).

A map is ``{selection: entry}``: the selection as ``PatchConfig.layers`` takes it (a grammar string such as
``"every:4"``, an index, a tuple of indices; in Python also a callable, resolved against the model when
patching), the entry an encoding name, a ``{"encoding": name, **options}`` mapping, or a
:class:`~.config.PatchConfig` without layers of its own. :class:`LayerMap` holds one ``PatchConfig`` per
entry, each with its ``layers``; whether the selections overlap is checked when patching, where the layer
count is known. The file a map is saved in holds ``{"layer_map": [config, ...]}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .config import CONFIG_NAME, LAYERED_FORMAT_VERSION, PatchConfig, read_config_file

__all__ = ["LayerMap", "load_config"]


@dataclass(frozen=True)
class LayerMap:
    """The patches of one model on disjoint layer selections (see the module docstring)."""

    configs: tuple[PatchConfig, ...]

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError("a layer map needs at least one entry {selection: encoding}")
        for config in self.configs:
            if not isinstance(config, PatchConfig):
                raise TypeError(f"a layer map holds PatchConfig entries, got {type(config).__name__}")
            if config.layers is None:
                raise ValueError(f"every entry of a layer map names its layers; {config.encoding!r} has none")

    @classmethod
    def from_spec(cls, spec, resolve: Callable | None = None) -> LayerMap:
        """A map from ``{selection: entry}`` (module docstring). ``resolve`` turns a callable selection into
        layer indices (``hf_trajpe.patch`` passes one that asks the model); without it a callable is refused."""
        if isinstance(spec, LayerMap):
            return spec
        if not isinstance(spec, Mapping) or not spec:
            raise TypeError("a layer map is a non-empty mapping {selection: encoding}, e.g. "
                            "{'every:4:3': 'none', 'top:2': {'encoding': 'alibi'}}")
        configs = []
        for selection, entry in spec.items():
            try:
                configs.append(_entry(selection, entry, resolve))
            except (TypeError, ValueError) as err:
                raise type(err)(f"layer map entry {selection!r}: {err}") from None
        return cls(tuple(configs))

    # -- round trip ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"layer_map": [c.to_dict() for c in self.configs], "version": LAYERED_FORMAT_VERSION}

    @classmethod
    def from_dict(cls, data: dict) -> LayerMap:
        entries = data.get("layer_map")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ValueError("'layer_map' must be a list of patch configs (JSON objects)")
        return cls(tuple(PatchConfig.from_dict(e) for e in entries))

    def save(self, directory: str | os.PathLike, save_id: str | None = None) -> str:
        """Write ``hf_trajpe_config.json`` (``{"layer_map": [...]}``) into ``directory``; returns its path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, CONFIG_NAME)
        data = self.to_dict() | ({"save_id": save_id} if save_id is not None else {})
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        return path

    @property
    def encodings(self) -> tuple[str, ...]:
        return tuple(c.encoding for c in self.configs)

    def describe(self) -> str:
        return "; ".join(f"{c.encoding} on layers {c.layers!r}" for c in self.configs)


def _entry(selection, entry, resolve: Callable | None) -> PatchConfig:
    if callable(selection) and not isinstance(selection, str):
        if resolve is None:
            raise TypeError("a callable layer selection is resolved against the model: give the map to "
                            "hf_trajpe.patch(model, {...})")
        layers = resolve(selection)
    elif isinstance(selection, int) and not isinstance(selection, bool):
        layers = (selection,)
    else:
        layers = selection
    if isinstance(entry, PatchConfig):
        if entry.layers is not None:
            raise ValueError("the PatchConfig of a map entry takes its layers from the map's key; leave its own "
                             "layers unset")
        return entry.replace(layers=layers)
    if isinstance(entry, str):
        return PatchConfig.from_options(entry, layers=layers)
    if isinstance(entry, Mapping):
        options = dict(entry)
        encoding = options.pop("encoding", None)
        if not isinstance(encoding, str):
            raise ValueError(f"expected {{'encoding': name, ...options}}, got {dict(entry)!r}")
        if "layers" in options:
            raise ValueError("the layers of a map entry are its key; leave 'layers' out of the entry")
        return PatchConfig.from_options(encoding, layers=layers, **options)
    raise TypeError(f"an entry is an encoding name, a mapping {{'encoding': name, ...options}} or a PatchConfig; "
                    f"got {type(entry).__name__}")


def load_config(directory: str | os.PathLike) -> PatchConfig | LayerMap:
    """The patch saved in ``directory``: a :class:`PatchConfig`, or a :class:`LayerMap` for a model that carried
    several patches on disjoint layers."""
    path, data = read_config_file(directory)
    if "layer_map" not in data:
        return PatchConfig.load(directory)
    try:
        return LayerMap.from_dict({k: v for k, v in data.items() if k not in ("save_id", "version")})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
