"""``PatchConfig``: the options of :func:`hf_trajpe.patch`, validated, saved as JSON beside the weights.

No transformers import here: a config can be built and checked without a model.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from types import MappingProxyType

from .layers import normalize_selection
from .schemes import encoding_names, trajectory_base_names
from .schemes.encodings import base_of, check_options, declared_options, declarers_for, own_options, takers
from .schemes.option import TOP_LEVEL_KEYS

__all__ = ["ENCODINGS", "TRAJECTORY_BASES", "CONFIG_NAME", "PatchConfig", "read_config_file"]

#: Encodings that :func:`hf_trajpe.patch` knows, from the registered schemes (a family may support a
#: subset: see ``SUPPORTED``).
ENCODINGS: tuple[str, ...] = encoding_names()
#: Bases that ``trajectory`` can run on (schemes that read fractional positions); ``learned`` is the
#: model's own learned absolute table.
TRAJECTORY_BASES: tuple[str, ...] = trajectory_base_names()
#: File written beside the weights by ``save_pretrained`` on a patched model.
CONFIG_NAME = "hf_trajpe_config.json"
#: the format version written for a patch of every layer without rotary_fraction (readable since the first release)
FORMAT_VERSION = 1
#: the version written for a patch that uses ``layers``, ``rotary_fraction`` or a layer map: an hf_trajpe that
#: reads only version 1 refuses such a file (it would drop those keys and patch every layer whole)
LAYERED_FORMAT_VERSION = 2
#: the newest version this hf_trajpe reads
READ_VERSION = LAYERED_FORMAT_VERSION
#: keys of the saved file that are not options (``save_id``: which save wrote it; persistence.py)
FILE_KEYS = ("save_id",)
#: the largest position limit: float32 positions keep 1/8 of a position past 2**20
MAX_POSITIONS = 2**20


class PatchConfig:
    """What to patch a model with. Validates itself on construction.

    ``PatchConfig(encoding, **options)``, as :func:`hf_trajpe.patch` takes them:

    - ``encoding``: one of :data:`ENCODINGS`.
    - ``max_positions``: the most positions a sequence may address, the same for every family.
      ``None``: the learned table's rows where the scheme reads one, no limit otherwise (RoPE, ALiBi,
      the sinusoid and NoPE have no end). Longer sequences are refused; trajectory positions past it
      are clamped, with one warning and a count (``PatchHandle.clamped_tokens``).
    - ``layers``: the attention layers the patch applies to (:mod:`hf_trajpe.patching.layers`: a list of
      indices, a slice, ``"every:4"``, ``"top:8"``, ``"0-3,7"``, ...); ``None``: every layer. Layers not
      selected keep the model's own encoding. Kept as given (a grammar string or a tuple of indices).
    - every other option is declared by the scheme or position source that reads it (an
      :class:`~.schemes.option.Option`: ``strength``, ``beta``, ... by ``trajectory``; ``rope_parameters``,
      ``rotary_fraction``, ``rope_theta`` by ``rope``; ``sinusoid_scale`` by ``sinusoidal``; ``npos_max`` by
      ``cope``; the table in docs/patching.md, "Options"). A patch takes the options of its encoding, and of
      its base for trajectory (``native`` and trajectory on the model's own scheme: those of the scheme the
      model has, checked when patching). Any other option is refused, whatever its value. ``scheme_options``:
      the same options as a dict (how files keep those saved there).

    ``options`` holds the values in force, every declared option filled in (defaults where not given), so a
    saved patch reloads with the same values; ``config.strength`` and the like read it (an option the
    encoding does not take reads as its default).
    """

    #: the options every encoding takes, kept as attributes
    SHARED = ("max_positions", "layers")

    def __init__(self, encoding: str, *, max_positions: int | None = None, layers=None,
                 scheme_options: Mapping | None = None, version: int = FORMAT_VERSION, **options) -> None:
        if encoding not in encoding_names():
            raise ValueError(f"unknown encoding {encoding!r}; supported encodings: {', '.join(encoding_names())}")
        if scheme_options is not None:
            if not isinstance(scheme_options, Mapping) or not all(isinstance(k, str) for k in scheme_options):
                raise TypeError(f"scheme_options must be a dict of option name -> value, got {scheme_options!r}")
            for key in scheme_options:
                if key in options:
                    raise TypeError(f"option {key!r} given twice (as a keyword and in scheme_options)")
            options = {**options, **scheme_options}
        self.encoding = encoding
        unknown = sorted(k for k in options if k not in declared_options())
        if unknown:
            raise TypeError(self._unknown(unknown, encoding, options))
        self._options = check_options(encoding, options)
        mp = max_positions
        if mp is not None and (not isinstance(mp, int) or isinstance(mp, bool) or not 1 <= mp <= MAX_POSITIONS):
            raise ValueError(
                f"max_positions must be an integer from 1 to {MAX_POSITIONS:,} or None (no limit), got "
                f"{max_positions!r} (beyond 2**20 float32 positions keep less than 1/8 of their fraction)"
            )
        self.max_positions = max_positions
        self.layers = normalize_selection(layers)
        self.version = version

    @staticmethod
    def _unknown(unknown: list[str], encoding: str, options: dict) -> str:
        base = base_of(encoding, options)
        base = base if isinstance(base, str) and base in trajectory_base_names() else None
        own = own_options(encoding, base)
        declarers, _ = declarers_for(encoding, base)
        others: dict[str, list[str]] = {}
        for name in declared_options():
            if name not in own:
                others.setdefault(takers(name), []).append(name)
        mine = "".join(f"; options of {d.name}: {', '.join(o.name for o in d.options)}" for d in declarers
                       if d.options)
        return (f"unknown patch option(s) {unknown}; supported options: {', '.join(sorted(PatchConfig.SHARED))}"
                + mine + "".join(f"; options of {t} only: {', '.join(ns)}" for t, ns in others.items()))

    # -- the options in force ----------------------------------------------------------------------
    @property
    def options(self) -> Mapping:
        """The values of the declared options in force (read-only)."""
        return MappingProxyType(self._options)

    @property
    def scheme_options(self) -> dict:
        """The options the saved file keeps in its ``scheme_options`` object (``npos_max`` of ``cope``)."""
        declared = declared_options()
        return {k: v for k, v in self._options.items() if declared[k].saved == "scheme_options"
                or (declared[k].saved == "scheme_options_if_set" and declared[k].is_set(v))}

    def __getattr__(self, name: str):
        # a declared option: its value, or its default where this encoding does not take it
        declared = declared_options() if not name.startswith("_") else {}
        if name in declared:
            return self.__dict__.get("_options", {}).get(name, declared[name].default)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def model_options(self) -> tuple[str, ...]:
        """The options given for the model's own scheme (``native``, trajectory with ``base=None``), which the
        scheme the model has must declare: checked when patching."""
        own = own_options(self.encoding, base_of(self.encoding, self._options))
        return tuple(k for k in self._options if k not in own)

    def replace(self, **changes) -> PatchConfig:
        """A copy with ``changes`` (options or ``max_positions``/``layers``), checked again."""
        given = {"max_positions": self.max_positions, "layers": self.layers, **self._options, **changes}
        return PatchConfig(changes.pop("encoding", self.encoding), version=self.version,
                           **{k: v for k, v in given.items() if k != "encoding"})

    def __eq__(self, other) -> bool:
        if not isinstance(other, PatchConfig):
            return NotImplemented
        return ((self.encoding, self.max_positions, self.layers, self._options)
                == (other.encoding, other.max_positions, other.layers, other._options))

    __hash__ = None  # mutable options inside (rope_parameters): not a dict key

    def __repr__(self) -> str:
        shared = "".join(f", {k}={getattr(self, k)!r}" for k in self.SHARED if getattr(self, k) is not None)
        options = "".join(f", {k}={v!r}" for k, v in self._options.items())
        return f"PatchConfig(encoding={self.encoding!r}{options}{shared})"

    @classmethod
    def common_options(cls) -> tuple[str, ...]:
        """The options every encoding shares (``max_positions``, ``layers``)."""
        return cls.SHARED

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """Every option ``hf_trajpe.patch`` knows: the shared ones and those some encoding declares."""
        return (*cls.SHARED, *declared_options())

    @classmethod
    def from_options(cls, encoding: str, **options) -> PatchConfig:
        """``PatchConfig(encoding, **options)`` from flat keyword options, as ``hf_trajpe.patch`` takes them
        (``scheme_options`` may hold some of them as a dict). Raises ``TypeError`` for an option no encoding
        declares, listing the known ones, and ``ValueError`` for one this encoding does not take."""
        return cls(encoding, **options)

    # -- round trip ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The saved form: the top-level keys of :data:`TOP_LEVEL_KEYS` (the options saved there at their
        defaults where this encoding does not take them, as files have always had them; ``rope_parameters``,
        ``rotary_fraction`` and ``layers`` only when given), ``scheme_options`` when the encoding has some."""
        declared = declared_options()
        data: dict = {}
        needed = FORMAT_VERSION
        for key in TOP_LEVEL_KEYS:
            if key == "encoding":
                data[key] = self.encoding
            elif key in self.SHARED:
                value = self.layers if key == "layers" else self.max_positions
                if key == "layers" and value is None:
                    continue
                data[key] = list(value) if isinstance(value, tuple) else value
            elif key == "scheme_options":
                if self.scheme_options:
                    data[key] = self.scheme_options
            elif key == "version":
                data[key] = self.version
            else:
                option = declared[key]
                value = self._options.get(key, option.default)
                if option.saved == "top" or (option.saved == "top_if_set" and value is not None):
                    data[key] = value
        for key, value in self._options.items():
            if declared[key].saved != "no" and declared[key].is_set(value):
                needed = max(needed, declared[key].format_version)
        if self.layers is not None:
            needed = max(needed, LAYERED_FORMAT_VERSION)
        if needed > FORMAT_VERSION:
            data["version"] = max(data["version"], needed)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> PatchConfig:
        """The config of a saved file (any version this hf_trajpe reads). A top-level option at its default is
        a key that every file carries, taken or not; unknown keys are dropped with a warning."""
        data = {k: v for k, v in data.items() if k not in FILE_KEYS}
        declared = declared_options()
        top = {k for k in TOP_LEVEL_KEYS if k in declared and declared[k].saved.startswith("top")}
        known = {"encoding", "version", "scheme_options", *cls.SHARED, *top}
        unknown = sorted(set(data) - known)
        if unknown:
            warnings.warn(
                f"PatchConfig: ignoring unknown key(s) {unknown} (written by a newer hf_trajpe?)",
                UserWarning,
                stacklevel=2,
            )
        if "encoding" not in data:
            raise TypeError("a saved patch names its encoding; this one has no 'encoding' key")
        kept = {k: v for k, v in data.items() if k in known and not (k in top and not declared[k].is_set(v))}
        return cls(**kept)

    def save(self, directory: str | os.PathLike, save_id: str | None = None) -> str:
        """Write ``hf_trajpe_config.json`` into ``directory``; returns the file path. ``save_id``: the id of
        the ``save_pretrained`` that wrote ``config.json`` beside it (``persistence.SAVE_ID_KEY``)."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, CONFIG_NAME)
        data = self.to_dict() | ({"save_id": save_id} if save_id is not None else {})
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> PatchConfig:
        """The config saved in ``directory`` (a file holding a layer map is read by
        :func:`hf_trajpe.patching.layer_map.load_config`)."""
        path, data = read_config_file(directory)
        if "layer_map" in data:
            raise ValueError(f"{path} holds a layer map (several patches on disjoint layers), not one patch: read it "
                             "with hf_trajpe.patching.load_config, or reload the model with hf_trajpe.from_pretrained")
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from exc


def read_config_file(directory: str | os.PathLike) -> tuple[str, dict]:
    """``(path, data)`` of the ``hf_trajpe_config.json`` in ``directory``, its format version checked."""
    path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no {CONFIG_NAME} in {os.fspath(directory)!r}: it was not saved from a patched model "
            "(save a patched model with model.save_pretrained(...) or hf_trajpe.save_patch(...))"
        )
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc} (save the patch again)") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object of patch options, got {type(data).__name__}")
    version = data.get("version", FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(
            f"{path} has an invalid format version {version!r} (hf_trajpe writes a positive integer): the file "
            "is damaged or was edited by hand; save the patch again from the patched model"
        )
    if version > READ_VERSION:
        raise ValueError(
            f"{path} has format version {version!r}; this hf_trajpe reads versions 1 to {READ_VERSION} "
            "(a newer hf_trajpe wrote it: upgrade hf_trajpe)"
        )
    return path, data
