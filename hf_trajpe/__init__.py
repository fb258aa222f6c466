"""hf_trajpe: swap, fine-tune and measure positional encodings in Hugging Face transformers models.

Plugin API first: :func:`patch` a loaded model with another positional encoding, :func:`unpatch` it,
save and reload the patch (:func:`save_patch`, :func:`load_patch`, :func:`from_pretrained`);
:func:`extend` chooses a context extension for a RoPE model on validation text and leaves it patched with it;
:func:`register_attention` registers hf_trajpe's attention functions with transformers (``patch`` calls
it when needed). See docs/patching.md::

    >>> import hf_trajpe
    >>> handle = hf_trajpe.patch(model, "trajectory", base="rope", strength=0.2)

The building blocks the patches are made of are pure PyTorch and come from ``hf_trajpe.encodings``
(``sinusoidal_encoding``, ``rotary_cos_sin``, ``apply_rotary``, ``alibi_bias``, ``trajectory_positions``,
``interpolate_rows``, ...), with the trajectory strength (``hf_trajpe.strength``), the displacement
cache (``hf_trajpe.cache``), the content-type detector (``hf_trajpe.content``) and the monitor
(``hf_trajpe.monitoring``); they are re-exported here.

Every name is imported on first use (PEP 562), so ``import hf_trajpe`` imports neither torch nor
transformers and the ``hf-trajpe`` command line starts quickly.
"""

from __future__ import annotations

import os as _os
from importlib import import_module as _import_module

__version__ = "0.1.0"

__all__ = [
    # the plugin API (hf_trajpe.patching)
    "patch",
    "unpatch",
    "get_handle",
    "from_pretrained",
    "load_patch",
    "save_patch",
    "PatchConfig",
    "PatchHandle",
    "SUPPORTED",
    "register_attention",
    "unit_boundary_ids",
    "LayerMap",
    "LayerMapHandle",
    # context extension chosen on evidence (hf_trajpe.extension)
    "extend",
    # building blocks (hf_trajpe.encodings)
    "sinusoidal_encoding",
    "sinusoidal_frequencies",
    "SinusoidalTable",
    "rotary_cos_sin",
    "rotary_inv_freq",
    "apply_rotary",
    "rotate_half",
    "rotate_every_two",
    "alibi_slopes",
    "alibi_bias",
    "trajectory_positions",
    "TrajectoryPast",
    "interpolate_rows",
    "INTERPOLATION_MODES",
    # the trajectory strength (hf_trajpe.strength)
    "AUTO_STRENGTHS",
    "AutoStrength",
    "FixedStrength",
    "LearnableStrength",
    "make_strength",
    # the displacement cache (hf_trajpe.cache)
    "DisplacementCache",
    "embedding_version",
    # the content-type detector (hf_trajpe.content)
    "CONTENT_TYPES",
    "detect_content_type",
    # monitoring (hf_trajpe.monitoring)
    "TrajectoryMonitor",
    "global_monitor",
    "enable_global_monitor",
]

#: submodule that defines each public name, grouped as in ``__all__``
_SOURCES: dict[str, str] = {
    name: f"{__name__}.{module}"
    for module, names in {
        "patching": ("patch", "unpatch", "get_handle", "from_pretrained", "load_patch", "save_patch",
                     "PatchConfig", "PatchHandle", "LayerMap", "LayerMapHandle", "SUPPORTED", "register_attention",
                     "unit_boundary_ids"),
        "extension": ("extend",),
        "encodings": ("sinusoidal_encoding", "sinusoidal_frequencies", "SinusoidalTable", "rotary_cos_sin",
                      "rotary_inv_freq", "apply_rotary", "rotate_half", "rotate_every_two", "alibi_slopes",
                      "alibi_bias", "trajectory_positions", "TrajectoryPast", "interpolate_rows",
                      "INTERPOLATION_MODES"),
        "strength": ("AUTO_STRENGTHS", "AutoStrength", "FixedStrength", "LearnableStrength", "make_strength"),
        "cache": ("DisplacementCache", "embedding_version"),
        "content": ("CONTENT_TYPES", "detect_content_type"),
        "monitoring": ("TrajectoryMonitor", "global_monitor", "enable_global_monitor"),
    }.items()
    for name in names
}



def _submodules() -> frozenset[str]:
    """The submodules and subpackages reachable as attributes (``hf_trajpe.encodings``, ``hf_trajpe.loading``)
    without importing them first: every one in the package's folder, so none is left out when one is added
    (read on the first lookup of one; ``pkgutil`` would cost ``import hf_trajpe`` several milliseconds)."""
    global _SUBMODULE_NAMES
    if _SUBMODULE_NAMES is None:
        folder = __path__[0]
        _SUBMODULE_NAMES = frozenset(
            entry.name.removesuffix(".py") for entry in _os.scandir(folder)
            if not entry.name.startswith(("_", "."))
            and (entry.name.endswith(".py") or _os.path.isfile(_os.path.join(entry.path, "__init__.py"))))
    return _SUBMODULE_NAMES


_SUBMODULE_NAMES: frozenset[str] | None = None


def __getattr__(name: str):
    if name in _SOURCES:
        module = _import_module(_SOURCES[name])
        try:
            value = getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}: "
                                 f"{_SOURCES[name]} does not define it") from None
    elif name in _submodules():
        value = _import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _submodules())
