"""Context extension of a rotary model: transformers' ``rope_parameters`` applied to a loaded model.

transformers applies a RoPE scaling only when a model is built from a config; ``hf_trajpe.patch(model,
"rope", rope_parameters={...})`` (or trajectory on ``rope``) applies one to a model already loaded. The dict
is exactly transformers' ``rope_parameters`` (the keys of a model card's ``config.json``), plus ``ntk``:
static NTK-aware scaling, ``rope_theta * factor ** (d / (d - 2))`` with ``d`` the rotary width (bloc97's
rule, fixed at patch time; transformers has only the dynamic variant).

Semantics (docs/patching.md, "Context extension"):

- The given parameters **replace** the model's own (a ``llama3`` or ``yarn`` model patched with ``yarn``
  runs plain yarn, not both), always **relative to the pretraining length**: ``original_max_position_embeddings``
  defaults to the model's own ``original_max_position_embeddings`` if its config has one (in ``rope_parameters``
  or beside them), else to its ``max_position_embeddings``; ``rope_theta`` and ``partial_rotary_factor``
  default to the model's.
- On a model with a rotary module, ``config.max_position_embeddings`` follows the extension: ``original *
  factor`` (``dynamic`` keeps the trained length there: transformers reads it as the length from which dynamic
  scaling starts); a top-level ``original_max_position_embeddings`` (Phi-3's, which transformers takes over the
  one in ``rope_parameters``) is set to the resolved one. On a model without one (the rotation inside
  attention) the config stays: its ``max_position_embeddings`` is the learned table's size, fixed by the weights.
- The resolved dict (every default filled in) is what the patch saves, so a reload applies the same numbers
  whatever the reloaded config says.

Frequencies come from transformers' own code: on a model with a rotary module, a second instance of that
module built from a copy of the config with the new parameters (``ROPE_INIT_FUNCTIONS`` and, for ``dynamic``
and ``longrope``, its run-time update), so the patched model equals the one transformers builds from that
config; on a model without one (rotation inside attention), ``ROPE_INIT_FUNCTIONS`` on a minimal config.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

__all__ = ["ROPE_TYPES", "DYNAMIC_ROPE_TYPES", "RopeScaling", "check_rope_parameters", "resolve_rope_parameters",
           "trained_length", "extended_length", "extend_config", "scaled_rotary_module", "attention_rope_frequencies"]

#: accepted keys per ``rope_type``: (required, optional); ``original_max_position_embeddings`` and
#: ``rope_theta`` are filled from the model where required and not given (transformers' own validators
#: name the same keys; it only logs unknown ones, hf_trajpe refuses them)
ROPE_TYPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "default": (frozenset(), frozenset({"rope_theta", "partial_rotary_factor"})),
    "linear": (frozenset({"factor"}), frozenset({"rope_theta", "partial_rotary_factor"})),
    "dynamic": (frozenset({"factor"}), frozenset({"rope_theta", "partial_rotary_factor"})),
    "ntk": (frozenset({"factor"}), frozenset({"rope_theta", "partial_rotary_factor",
                                               "original_max_position_embeddings"})),
    "yarn": (frozenset({"factor"}), frozenset({"rope_theta", "partial_rotary_factor",
                                                "original_max_position_embeddings", "attention_factor", "beta_fast",
                                                "beta_slow", "mscale", "mscale_all_dim", "truncate"})),
    "longrope": (frozenset({"short_factor", "long_factor"}),
                 frozenset({"rope_theta", "partial_rotary_factor", "original_max_position_embeddings", "factor",
                            "attention_factor"})),
    "llama3": (frozenset({"factor", "low_freq_factor", "high_freq_factor"}),
               frozenset({"rope_theta", "partial_rotary_factor", "original_max_position_embeddings"})),
}
#: types whose frequencies change with the sequence length inside the rotary module's forward
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")
#: keys that must be > 0, and why (0 or less gives NaN or a division by zero in transformers' formulas)
_POSITIVE = {
    "attention_factor": "it scales the attention logits; 1.0 leaves them as they are",
    "beta_fast": "a number of rotations; YaRN uses 32",
    "beta_slow": "a number of rotations; YaRN uses 1",
    "low_freq_factor": "the wavelength below which frequencies are scaled is the trained length over it; Llama 3.1 "
                       "uses 1.0",
    "high_freq_factor": "the wavelength below which frequencies are kept is the trained length over it; Llama 3.1 "
                        "uses 4.0",
    "partial_rotary_factor": "the share of each head that rotates",
}
_NUMBERS = ("factor", "rope_theta", "partial_rotary_factor", "attention_factor", "beta_fast", "beta_slow", "mscale",
            "mscale_all_dim", "low_freq_factor", "high_freq_factor")


def _number(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"rope_parameters[{key!r}] must be a finite number, got {value!r}")
    return float(value)


def check_rope_parameters(params) -> dict:
    """Check a user's ``rope_parameters`` without a model (types, keys, values); returns a copy.

    An unknown ``rope_type``, an unknown key or a missing required one raises ``ValueError`` naming the
    accepted ones."""
    if not isinstance(params, dict):
        raise ValueError(f"rope_parameters must be a dict like transformers' config.rope_parameters, got "
                         f"{type(params).__name__}")
    params = dict(params)
    if "type" in params and "rope_type" not in params:  # transformers' older spelling
        params["rope_type"] = params.pop("type")
    rope_type = params.get("rope_type")
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_parameters['rope_type'] must be one of {', '.join(ROPE_TYPES)}, got {rope_type!r}")
    required, optional = ROPE_TYPES[rope_type]
    given = set(params) - {"rope_type"}
    missing, unknown = sorted(required - given), sorted(given - required - optional)
    accepted = ", ".join(["rope_type", *sorted(required), *sorted(optional)])
    if missing:
        raise ValueError(f"rope_parameters for rope_type {rope_type!r} needs {', '.join(missing)}; accepted keys: "
                         f"{accepted}")
    if unknown:
        raise ValueError(f"rope_parameters for rope_type {rope_type!r} does not take {', '.join(unknown)}; "
                         f"accepted keys: {accepted}")
    for key in _NUMBERS:
        if key in params:
            params[key] = _number(key, params[key])
    if "factor" in params and params["factor"] < 1:
        raise ValueError(f"rope_parameters['factor'] must be >= 1 (the extension), got {params['factor']}")
    if "rope_theta" in params and params["rope_theta"] <= 1:
        raise ValueError(f"rope_parameters['rope_theta'] must be > 1, got {params['rope_theta']}")
    for key, why in _POSITIVE.items():
        if key in params and params[key] <= 0:
            raise ValueError(f"rope_parameters[{key!r}] must be > 0 ({why}), got {params[key]}")
    if "partial_rotary_factor" in params and params["partial_rotary_factor"] > 1:
        raise ValueError(f"rope_parameters['partial_rotary_factor'] must be in (0, 1] (the share of each head that "
                         f"rotates), got {params['partial_rotary_factor']}")
    if rope_type == "llama3" and params["high_freq_factor"] <= params["low_freq_factor"]:
        raise ValueError(
            f"rope_parameters['high_freq_factor'] ({params['high_freq_factor']}) must be greater than "
            f"rope_parameters['low_freq_factor'] ({params['low_freq_factor']}): llama3 blends the frequencies between "
            "the two wavelengths they set, dividing by their difference (Llama 3.1: low 1.0, high 4.0)")
    omp = params.get("original_max_position_embeddings")
    if omp is not None and (isinstance(omp, bool) or not isinstance(omp, int) or omp < 1):
        raise ValueError(f"rope_parameters['original_max_position_embeddings'] must be a positive integer, got {omp!r}")
    for key in ("short_factor", "long_factor"):
        if key in params:
            values = params[key]
            if not isinstance(values, (list, tuple)) or not values:
                raise ValueError(f"rope_parameters[{key!r}] must be a list of numbers, got {values!r}")
            params[key] = [_number(key, v) for v in values]
            bad = [v for v in params[key] if v <= 0]
            if bad:
                raise ValueError(f"rope_parameters[{key!r}] must hold numbers > 0 (each divides the frequency of its "
                                 f"dimension pair), got {bad[0]} among {len(values)} values")
    if "truncate" in params and not isinstance(params["truncate"], bool):
        raise ValueError(f"rope_parameters['truncate'] must be true or false, got {params['truncate']!r}")
    return params


@dataclass(frozen=True)
class RopeScaling:
    """A resolved extension: ``parameters`` as transformers' ``config.rope_parameters`` (static NTK already
    turned into ``default`` with its ``rope_theta``), the ``max_position_embeddings`` that goes with it, and
    ``given``: the user's dict with every default filled in (what the patch saves)."""

    parameters: dict
    max_position_embeddings: int
    given: dict

    @property
    def dynamic(self) -> bool:
        return self.parameters["rope_type"] in DYNAMIC_ROPE_TYPES


def _stock_parameters(model_config) -> dict:
    params = getattr(model_config, "rope_parameters", None)
    if params is None:
        return {}
    if any(isinstance(v, dict) for v in params.values()):
        raise NotImplementedError(
            f"{model_config.model_type}: rope_parameters differ per layer type in this model; context extension "
            "applies to models with one set of rotary parameters")
    return dict(params)


def _top_level_original(model_config) -> int | None:
    """The trained length a config keeps beside ``rope_parameters`` (Phi-3's ``original_max_position_embeddings``),
    which transformers prefers to the one inside them for llama3, yarn and longrope."""
    value = getattr(model_config, "original_max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trained_length(model_config) -> int | None:
    """The length a model's rotation was trained for, from which an extension counts: the
    ``original_max_position_embeddings`` in its ``rope_parameters`` or beside them, else its
    ``max_position_embeddings``; ``None`` when its config has neither."""
    params = getattr(model_config, "rope_parameters", None) or {}
    inside = None if any(isinstance(v, dict) for v in params.values()) else params.get(
        "original_max_position_embeddings")  # (parameters per layer type keep no trained length inside)
    length = inside or _top_level_original(model_config) or getattr(model_config, "max_position_embeddings", None)
    return int(length) if length else None


def extended_length(given: dict, model_config) -> int | None:
    """The ``max_position_embeddings`` that goes with the extension ``given`` (checked; its trained length is its
    ``original_max_position_embeddings``, else :func:`trained_length`): ``original * factor``, the trained length
    itself for ``default`` and ``dynamic`` (transformers reads it as the length dynamic scaling starts from);
    ``None`` when the trained length is unknown."""
    original = given.get("original_max_position_embeddings") or trained_length(model_config)
    if not original:
        return None
    if given["rope_type"] in ("default", "dynamic"):
        return int(original)
    return int(round(original * given["factor"]))


def resolve_rope_parameters(given: dict, model_config, rotary_dim: int) -> RopeScaling:
    """Fill ``given`` (checked by :func:`check_rope_parameters`) from the model's config (module docstring)."""
    stock = _stock_parameters(model_config)
    params = dict(given)
    rope_type = params["rope_type"]
    stock_max = int(getattr(model_config, "max_position_embeddings", 0) or 0)
    original = params.get("original_max_position_embeddings") or stock.get("original_max_position_embeddings") \
        or _top_level_original(model_config) or stock_max
    if not original:
        raise ValueError(f"{model_config.model_type}: the config has no max_position_embeddings; give "
                         "rope_parameters['original_max_position_embeddings'] (the trained length)")
    theta = params.get("rope_theta", stock.get("rope_theta", getattr(model_config, "rope_theta", None)))
    if theta is None:
        theta = 10000.0
    params["rope_theta"] = float(theta)
    own_partial = stock.get("partial_rotary_factor", getattr(model_config, "partial_rotary_factor", None))
    given_partial = params.get("partial_rotary_factor")
    if given_partial is not None and given_partial != (1.0 if own_partial is None else own_partial):
        mine = (f"the model's {own_partial}" if own_partial is not None
                else "this model, which rotates whole heads (it has no partial_rotary_factor)")
        raise ValueError(
            f"rope_parameters['partial_rotary_factor']={given_partial} differs from {mine}: it chooses which "
            "dimensions rotate, not the context length; leave it out (rotary_fraction=... rotates part of each head)")
    if own_partial is not None:
        params["partial_rotary_factor"] = float(own_partial)
    if rope_type in ("yarn", "longrope", "llama3", "ntk"):
        params["original_max_position_embeddings"] = int(original)
    factor = params.get("factor")
    if rope_type == "longrope":
        half = rotary_dim // 2
        for key in ("short_factor", "long_factor"):
            if len(params[key]) != half:
                raise ValueError(f"rope_parameters[{key!r}] has {len(params[key])} values; this model rotates "
                                 f"{rotary_dim} dimensions per head, so it needs {half}")
        if factor is None:
            if stock_max <= original:
                raise ValueError("rope_parameters for longrope needs 'factor' (the extension over "
                                 "original_max_position_embeddings) on a model not extended already")
            factor = stock_max / original
            params["factor"] = float(factor)
    new_max = extended_length({**params, "original_max_position_embeddings": int(original)}, model_config)
    parameters = {k: v for k, v in params.items() if k != "original_max_position_embeddings" or rope_type != "ntk"}
    if rope_type == "ntk":
        d = rotary_dim
        parameters = {"rope_type": "default", "rope_theta": params["rope_theta"] * factor ** (d / (d - 2))}
        if "partial_rotary_factor" in params:
            parameters["partial_rotary_factor"] = params["partial_rotary_factor"]
    return RopeScaling(parameters=parameters, max_position_embeddings=new_max, given=params)


def extended_config(model_config, scaling: RopeScaling):
    """A copy of ``model_config`` with the extension's ``rope_parameters`` and ``max_position_embeddings``."""
    new = copy.deepcopy(model_config)
    new.rope_parameters = copy.deepcopy(scaling.parameters)
    new.max_position_embeddings = scaling.max_position_embeddings
    if _top_level_original(new) is not None and "original_max_position_embeddings" in scaling.parameters:
        # transformers takes a top-level original_max_position_embeddings over the one in rope_parameters
        new.original_max_position_embeddings = scaling.parameters["original_max_position_embeddings"]
    for attr in ("rope_scaling",):  # an older alias some configs still carry
        if attr in vars(new):
            setattr(new, attr, copy.deepcopy(scaling.parameters))
    return new


def extend_config(model_config, scaling: RopeScaling):
    """Put the extension into the model's own config (so ``save_pretrained`` writes a config that plain
    transformers loads into the extended model); returns the step that restores the stock values."""
    missing = object()
    saved = {attr: vars(model_config).get(attr, missing)
             for attr in ("rope_parameters", "rope_scaling", "max_position_embeddings",
                          "original_max_position_embeddings")}
    model_config.rope_parameters = copy.deepcopy(scaling.parameters)
    if saved["rope_scaling"] is not missing:
        model_config.rope_scaling = copy.deepcopy(scaling.parameters)
    model_config.max_position_embeddings = scaling.max_position_embeddings
    if _top_level_original(model_config) is not None and "original_max_position_embeddings" in scaling.parameters:
        model_config.original_max_position_embeddings = scaling.parameters["original_max_position_embeddings"]

    def restore() -> None:
        for attr, value in saved.items():
            if value is missing:
                vars(model_config).pop(attr, None)
            else:
                setattr(model_config, attr, value)

    return restore


def scaled_rotary_module(stock, model_config, scaling: RopeScaling):
    """A new instance of the model's rotary module class built from the extended config: transformers' own
    frequencies (and run-time updates) for the new parameters, on the stock module's device."""
    import inspect

    inv_freq = getattr(stock, "inv_freq", None)
    device = inv_freq.device if inv_freq is not None else None
    cls = type(stock)
    kwargs = {"device": device} if "device" in inspect.signature(cls.__init__).parameters else {}
    try:
        module = cls(config=extended_config(model_config, scaling), **kwargs)
    except TypeError as exc:
        raise NotImplementedError(
            f"{cls.__name__} cannot be built from a config ({exc}); context extension needs a rotary "
            "module that transformers builds from config.rope_parameters") from exc
    return module.to(device) if device is not None else module


def attention_rope_frequencies(scaling: RopeScaling, head_dim: int, device=None):
    """``(inv_freq, attention_scaling)`` for a rotation inside attention (a model without a rotary module),
    from transformers' ``ROPE_INIT_FUNCTIONS`` on a minimal config; static types only."""
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if scaling.dynamic:
        raise NotImplementedError(
            f"rope_type {scaling.parameters['rope_type']!r} rescales at run time inside a model's rotary module; "
            "this model has none (the rotation runs inside attention): use yarn, linear, llama3 or ntk")
    config = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, head_dim=head_dim,
                         max_position_embeddings=scaling.max_position_embeddings,
                         rope_parameters=copy.deepcopy(scaling.parameters))
    rope_type = scaling.parameters["rope_type"]
    if rope_type == "default":
        theta, dim = scaling.parameters["rope_theta"], head_dim
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
        return inv, 1.0
    inv, attention_scaling = ROPE_INIT_FUNCTIONS[rope_type](config, device)
    return inv, float(attention_scaling)
