"""``PatchConfig``: the options of :func:`hf_trajpe.patch`, validated, saved as JSON beside the weights.

No transformers import here: a config can be built and checked without a model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from dataclasses import dataclass, field

from ..checks import check_beta
from ..encodings.interpolation import INTERPOLATION_MODES
from ..strength import check_strength_option
from .layers import normalize_selection
from .rope_scaling import check_rope_parameters
from .schemes import SCHEMES, check_interpolation, encoding_names, trajectory_base_names

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


def named_contributes(encoding: str) -> str | None:
    """What the scheme named ``encoding`` contributes (``None``: not a scheme's name)."""
    return SCHEMES[encoding].contributes if encoding in SCHEMES else None


@dataclass
class PatchConfig:
    """What to patch a model with. Validates itself on construction.

    Fields (all but ``encoding`` optional):

    - ``encoding``: one of :data:`ENCODINGS`.
    - ``base``: for ``trajectory`` only, one of :data:`TRAJECTORY_BASES`; ``None`` means the model's
      own scheme (``learned`` for GPT-2/BERT/RoBERTa, ``rope`` for the Llama family and GPT-NeoX).
    - ``strength``: trajectory alpha in [0, 1], or ``"auto"`` (per content type, docs/spec.md, section 2).
    - ``learnable_strength``: make alpha a trainable parameter (starts at ``strength``).
    - ``beta``: trajectory magnitude scaling (> 0).
    - ``interpolation``: how a base is read at fractional positions: ``linear``/``cubic`` (a table
      of integer positions, the seed design) or ``exact`` (analytic: sinusoidal, rope, alibi).
      ``None`` picks ``linear`` for the learned table and ``exact`` otherwise.
    - ``detach``: stop gradients from positions into the embeddings (trajectory only).
    - ``cache``/``cache_size``: the displacement cache of docs/spec.md, section 2 (trajectory only).
    - ``max_positions``: the most positions a sequence may address, the same for every family.
      ``None``: the learned table's rows where the scheme reads one, no limit otherwise (RoPE, ALiBi,
      the sinusoid and NoPE have no end). Longer sequences are refused; trajectory positions past it
      are clamped, with one warning and a count (``PatchHandle.clamped_tokens``).
    - ``rope_theta``: base of the rotary frequencies when ``rope`` is put on a model that has none
      (models with their own rotary module keep their own frequencies).
    - ``extend``: content-aware context extension (trajectory only): positions advance by ``1/extend`` on
      average, each step larger where the content moves more (:func:`hf_trajpe.encodings.trajectory.extend_positions`);
      ``None``: plain trajectory positions.
    - ``rope_parameters``: context extension of the rotation (``rope``, ``native`` on a RoPE model, trajectory
      on ``rope``): transformers' ``config.rope_parameters`` dict (``rope_type`` ``default``, ``linear``,
      ``dynamic``, ``yarn``, ``longrope``, ``llama3``, or ``ntk`` for static NTK-aware scaling, with their
      keys); see :mod:`hf_trajpe.patching.rope_scaling`. Saved with every default filled in.
    - ``sinusoid_scale``: amplitude of the added sinusoid (``sinusoidal``, or ``trajectory`` on it).
      ``1.0`` is the unit sinusoid of docs/spec.md, section 2. ``"embeddings"`` matches the RMS of the
      model's token embeddings at patch time (resolved to a number then, so a saved patch reloads
      with the same scale): a unit sinusoid drowns token embeddings of std 0.02 (GPT-2's init).
    - ``rotary_fraction``: the share of each head's width that rotates (``rope``, or trajectory on it), as
      GPT-NeoX's ``rotary_pct`` and Phi's ``partial_rotary_factor``: the first ``int(head_dim * fraction)``
      dimensions (even), half-split among themselves; the rest pass unrotated. The rotation then runs inside
      attention, with default frequencies at the model's ``rope_theta`` (its own on a model with a rotary
      module, whose own rotation is switched off; ``rope_theta`` on others). ``None``: the model's own width.
    - ``layers``: the attention layers the patch applies to (:mod:`hf_trajpe.patching.layers`: a list of
      indices, a slice, ``"every:4"``, ``"top:8"``, ``"0-3,7"``, ...); ``None``: every layer. Layers not
      selected keep the model's own encoding. Kept as given (a grammar string or a tuple of indices).
    - ``scheme_options``: the options the chosen scheme declares itself (``Scheme.options``, e.g.
      ``npos_max`` of ``cope``), every one filled in (defaults where not given), so a saved patch
      reloads with the same values. ``hf_trajpe.patch(model, "cope", npos_max=32)`` puts keyword
      options there (:meth:`from_options`). Left out of the saved file when empty.
    """

    encoding: str
    base: str | None = None
    strength: float | str = 0.2
    learnable_strength: bool = False
    beta: float = 2.0
    interpolation: str | None = None
    detach: bool = False
    cache: bool = False
    cache_size: int = 10_000
    extend: float | None = None
    max_positions: int | None = None
    rope_theta: float = 10000.0
    sinusoid_scale: float | str = 1.0
    rope_parameters: dict | None = None
    rotary_fraction: float | None = None
    layers: str | tuple[int, ...] | None = None
    scheme_options: dict = field(default_factory=dict)
    version: int = field(default=FORMAT_VERSION, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.encoding not in encoding_names():
            raise ValueError(
                f"unknown encoding {self.encoding!r}; supported encodings: {', '.join(encoding_names())}"
            )
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        trajectory_only = ("base", "strength", "learnable_strength", "beta", "interpolation", "detach",
                           "cache", "cache_size", "extend")
        if self.encoding != "trajectory":
            given = [k for k in trajectory_only if getattr(self, k) != defaults[k]]
            if given:
                raise ValueError(
                    f"option(s) {', '.join(given)} apply only to encoding='trajectory', not {self.encoding!r}"
                )
        if self.base is not None and self.base not in trajectory_base_names():
            raise ValueError(
                f"unknown trajectory base {self.base!r}; supported bases: {', '.join(trajectory_base_names())}"
            )
        self.strength = check_strength_option(self.strength, self.learnable_strength)
        self.beta = check_beta(self.beta)
        if self.interpolation is not None and self.interpolation not in INTERPOLATION_MODES:
            raise ValueError(
                f"unknown interpolation {self.interpolation!r}; supported: {', '.join(INTERPOLATION_MODES)}"
            )
        if self.base is not None:  # (with base=None the model decides the base: checked when patching)
            check_interpolation(self.base, self.interpolation)
        if not isinstance(self.cache_size, int) or isinstance(self.cache_size, bool) or self.cache_size < 1:
            raise ValueError(f"cache_size must be a positive integer, got {self.cache_size!r}")
        mp = self.max_positions
        if mp is not None and (not isinstance(mp, int) or isinstance(mp, bool) or not 1 <= mp <= MAX_POSITIONS):
            raise ValueError(
                f"max_positions must be an integer from 1 to {MAX_POSITIONS:,} or None (no limit), got "
                f"{self.max_positions!r} (beyond 2**20 float32 positions keep less than 1/8 of their fraction)"
            )
        rt = self.rope_theta
        if isinstance(rt, bool) or not isinstance(rt, (int, float)) or not (math.isfinite(rt) and rt > 1):
            raise ValueError(f"rope_theta must be a number > 1, got {self.rope_theta!r}")
        named = self.option_scheme()
        if self.rope_theta != defaults["rope_theta"] and named is not None and SCHEMES[named].contributes != "rotary":
            raise ValueError(
                f"rope_theta applies only where a rotation is applied (encoding='rope', or trajectory on "
                f"base='rope'); {self.encoding!r}" + (f" on {self.base!r}" if self.base else "")
                + " uses no rotary, so it would be ignored: leave rope_theta out"
            )
        if isinstance(self.sinusoid_scale, str):
            if self.sinusoid_scale != "embeddings":
                raise ValueError(f"sinusoid_scale must be a number > 0 or 'embeddings', got {self.sinusoid_scale!r}")
        elif isinstance(self.sinusoid_scale, bool) or not isinstance(self.sinusoid_scale, (int, float)) or not (
            math.isfinite(self.sinusoid_scale) and self.sinusoid_scale > 0
        ):
            raise ValueError(f"sinusoid_scale must be a number > 0 or 'embeddings', got {self.sinusoid_scale!r}")
        else:
            self.sinusoid_scale = float(self.sinusoid_scale)
        on_sinusoid = self.encoding == "sinusoidal" or (self.encoding == "trajectory" and self.base == "sinusoidal")
        if self.sinusoid_scale != 1.0 and not on_sinusoid:
            raise ValueError(
                "sinusoid_scale applies only to encoding='sinusoidal' or trajectory with base='sinusoidal', "
                f"not {self.encoding!r}" + (f" on {self.base!r}" if self.base else "")
            )
        if self.extend is not None:
            ext = self.extend
            if isinstance(ext, bool) or not isinstance(ext, (int, float)) or not (math.isfinite(ext) and ext >= 1):
                raise ValueError(f"extend must be a number >= 1 (read text extend times longer than the trained "
                                 f"length: positions advance by 1/extend on average), got {ext!r}")
            self.extend = float(ext)
        if self.rope_parameters is not None:
            rotation = (self.encoding in ("rope", "native") or named_contributes(self.encoding) == "remap"
                        or (self.encoding == "trajectory" and self.base in (None, "rope")))
            if not rotation:
                raise ValueError(
                    "rope_parameters extends a rotary encoding: give it with encoding='rope', 'native' (on a RoPE "
                    f"model), a remap ({', '.join(n for n in SCHEMES if named_contributes(n) == 'remap')}) or "
                    f"'trajectory' on base 'rope', not {self.encoding!r}"
                    + (f" on {self.base!r}" if self.base else ""))
            self.rope_parameters = check_rope_parameters(self.rope_parameters)
        if self.rotary_fraction is not None:
            rf = self.rotary_fraction
            if isinstance(rf, bool) or not isinstance(rf, (int, float)) or not (math.isfinite(rf) and 0 < rf <= 1):
                raise ValueError(f"rotary_fraction must be a number in (0, 1] (the share of each head that rotates), "
                                 f"got {rf!r}")
            self.rotary_fraction = float(rf)
            if self.rope_parameters is not None:
                raise ValueError("rotary_fraction and rope_parameters cannot be combined: rotary_fraction rotates part "
                                 "of each head with default frequencies; give one or the other")
            if named is not None and SCHEMES[named].contributes != "rotary":
                raise ValueError(
                    "rotary_fraction applies only where a rotation is applied (encoding='rope', or trajectory on "
                    f"base='rope'); {self.encoding!r}" + (f" on {self.base!r}" if self.base else "")
                    + " uses no rotary, so it would be ignored: leave rotary_fraction out")
        self.layers = normalize_selection(self.layers)
        for name in ("learnable_strength", "detach", "cache"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        self.scheme_options = self._check_scheme_options()

    def option_scheme(self) -> str | None:
        """The scheme whose own options apply: the encoding's, or trajectory's explicit base; ``None``
        for ``native`` and trajectory on the model's own scheme (decided by the model)."""
        if self.encoding in SCHEMES:
            return self.encoding
        return self.base if self.encoding == "trajectory" else None

    def _check_scheme_options(self) -> dict:
        given = self.scheme_options
        if not isinstance(given, dict) or not all(isinstance(k, str) for k in given):
            raise TypeError(f"scheme_options must be a dict of option name -> value, got {given!r}")
        name = self.option_scheme()
        if name is None:
            if given:
                raise ValueError(f"option(s) {', '.join(sorted(given))} belong to a scheme; encoding "
                                 f"{self.encoding!r} names none" + (" (give base=...)" if self.base is None
                                                                    and self.encoding == "trajectory" else ""))
            return {}
        return SCHEMES[name].check_options(given)

    @classmethod
    def common_options(cls) -> tuple[str, ...]:
        """The options every encoding shares (the fields, less ``encoding``, ``scheme_options``, ``version``)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("encoding", "scheme_options", "version"))

    @classmethod
    def from_options(cls, encoding: str, **options) -> PatchConfig:
        """``PatchConfig(encoding, ...)`` from flat keyword options, as ``hf_trajpe.patch`` takes them:
        the common options by name, and the options the chosen scheme declares (``npos_max`` for
        ``cope``) into ``scheme_options``. Raises ``TypeError`` for an option neither knows, listing both."""
        common = set(cls.common_options())
        scheme_options = dict(options.pop("scheme_options", None) or {})
        base = options.get("base") if encoding == "trajectory" else None
        name = next((n for n in (encoding, base) if isinstance(n, str) and n in SCHEMES), None)
        own = tuple(SCHEMES[name].options) if name is not None else ()
        unknown = sorted(k for k in options if k not in common and k not in own)
        if unknown:
            others = {n: tuple(c.options) for n, c in SCHEMES.items() if c.options and n != name}
            raise TypeError(
                f"unknown patch option(s) {unknown}; supported options: {', '.join(sorted(common))}"
                + (f"; options of {name}: {', '.join(own)}" if own else "")
                + "".join(f"; options of {n} (encoding={n!r} only): {', '.join(o)}" for n, o in others.items())
            )
        for k in [k for k in options if k in own]:
            if k in scheme_options:
                raise TypeError(f"option {k!r} given twice (as a keyword and in scheme_options)")
            scheme_options[k] = options.pop(k)
        return cls(encoding, **options, scheme_options=scheme_options)

    # -- round trip ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The saved form; ``scheme_options``, ``rope_parameters``, ``rotary_fraction`` and ``layers`` only when
        given (files of patches without them are as before those fields existed)."""
        data = dataclasses.asdict(self)
        for key in ("scheme_options", "rope_parameters", "rotary_fraction", "layers"):
            if data[key] is None or data[key] == {}:
                del data[key]
        if isinstance(self.layers, tuple):
            data["layers"] = list(self.layers)
        if self.layers is not None or self.rotary_fraction is not None:
            data["version"] = max(data["version"], LAYERED_FORMAT_VERSION)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> PatchConfig:
        data = {k: v for k, v in data.items() if k not in FILE_KEYS}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            warnings.warn(
                f"PatchConfig: ignoring unknown key(s) {unknown} (written by a newer hf_trajpe?)",
                UserWarning,
                stacklevel=2,
            )
        return cls(**{k: v for k, v in data.items() if k in known})

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
