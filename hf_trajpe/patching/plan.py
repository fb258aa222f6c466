"""Resolve once: the user's options and the model become one validated :class:`PatchPlan`.

:func:`resolve_plan` is the only place that decides which scheme runs, on which base, read how,
within which limits, hooked where; the state, replacement modules and attention functions trust the
plan and never check options again. Every refusal happens here, before the model is touched.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from torch import nn

from ..strength import make_strength
from .config import PatchConfig
from .families import FamilyAdapter, adapter_for
from .families.structure import rotary_frequencies
from .layers import describe_layers, resolve_selection
from .rope_scaling import RopeScaling, extended_length, resolve_rope_parameters, trained_length
from .schemes import check_interpolation, get_scheme
from .schemes.encodings import NATIVE, refuse_undeclared
from .schemes.source import SOURCES

__all__ = ["ATTENTION_NAMES", "ROTARY_TYPES", "PatchPlan", "resolve_plan", "get_path", "self_attention_modules"]

#: rotary types of a model's own rotary module that the patch reproduces: fixed at init, or (``dynamic``,
#: ``longrope``) updated with the sequence length by the module's own code before each use
ROTARY_TYPES = ("default", "linear", "llama3", "yarn", "dynamic", "longrope")
#: our attention implementation name for each stock one we wrap
ATTENTION_NAMES = {"eager": "hf_trajpe_eager", "sdpa": "hf_trajpe_sdpa", "flex_attention": "hf_trajpe_flex"}


def get_path(root: nn.Module, path: str) -> tuple[nn.Module, str, nn.Module]:
    """``(parent, attribute name, module)`` of a dotted submodule path."""
    parts = path.split(".")
    parent = root
    for p in parts[:-1]:
        parent = getattr(parent, p)
    return parent, parts[-1], getattr(parent, parts[-1])


def self_attention_modules(base: nn.Module, names: tuple[str, ...]) -> list[nn.Module]:
    """The self-attention modules of ``base`` (class names ``names``; not cross-attention), in model
    order: the modules our attention functions serve, numbered by this order."""
    return [m for m in base.modules()
            if type(m).__name__ in names and not getattr(m, "is_cross_attention", False)]


def _head_dim(modules: list[nn.Module], model_config) -> int | None:
    for attr in ("head_dim", "head_size", "attention_head_size"):
        value = getattr(modules[0], attr, None) if modules else None
        if isinstance(value, int) and value > 0:
            return value
    heads = getattr(model_config, "num_attention_heads", None)
    return getattr(model_config, "head_dim", None) or (model_config.hidden_size // heads if heads else None)


@dataclass(frozen=True)
class PatchPlan:
    """What a patch will do, decided once.

    - ``scheme``: the positional scheme that runs (the base, for trajectory); ``trajectory``: whether
      positions come from the trajectory source instead of integer ranks.
    - ``interpolation``: how the scheme is read at fractional positions; ``None`` for integer positions.
    - ``max_positions``: the most positions a sequence may address, the same for every family: the
      learned table's rows when the scheme reads one (or fewer, if asked), the user's ``max_positions``
      otherwise, ``None`` (no limit) when neither: RoPE, ALiBi, the sinusoid and NoPE have no end.
      Longer sequences are refused; trajectory positions past it are clamped, with a warning and a count.
    - ``hook``: where the scheme enters the model: ``table`` (the learned table's replacement),
      ``rotary`` (the rotary module's replacement), ``embeddings`` (added to the input embeddings),
      ``attention`` (our attention function), or ``none``.
    - ``head_dim``: the width of one attention head; ``attention_modules``: how many self-attention
      modules our attention functions serve (numbered in model order, or in the order of ``layers``; a
      scheme with per-layer state, such as CoPE, keeps one entry per module).
    - ``layers``: the attention layers the patch applies to (indices in model order); ``None``: all of them.
      With layers, ``hook`` ``rotary`` means the selected layers' ``position_embeddings`` (layer_hooks.py).
    - ``rotary_width``: the dimensions of each head a rotation inside attention turns (``rotary_fraction``);
      ``None``: the whole head.
    """

    config: PatchConfig
    family: FamilyAdapter
    scheme: str
    trajectory: bool
    interpolation: str | None
    causal: bool
    width: int
    table_offset: int
    max_positions: int | None
    hook: str
    attn_stock: str
    sinusoid_scale: float
    rope_theta: float
    head_dim: int | None = None
    attention_modules: int = 0
    #: context extension of the rotation (``rope_parameters``), resolved against the model; ``None``: none
    rope_scaling: RopeScaling | None = None
    layers: tuple[int, ...] | None = None
    rotary_width: int | None = None
    #: the length the model's rotation was trained for (that of ``rope_scaling`` when given; ``None``: its config
    #: has none), for schemes whose behaviour depends on it at run time
    trained_length: int | None = None

    @property
    def key_positions(self) -> bool:
        """Whether each forward keeps the positions of all keys (for a scheme applied inside attention)."""
        return self.uses_attention and get_scheme(self.scheme).needs_key_positions

    @property
    def uses_attention(self) -> bool:
        """Whether our attention functions must run (a bias, or a rotation on a model without a rotary module)."""
        return self.hook == "attention"

    def describe(self) -> str:
        c = self.config
        where = ("" if self.layers is None else f" on layer {self.layers[0]}" if len(self.layers) == 1
                 else f" on layers {describe_layers(self.layers)}")
        fraction = [f"rotary_fraction={c.rotary_fraction:g}"] if c.rotary_fraction is not None else []
        if self.trajectory:
            extend = f", extend={c.extend:g}" if c.extend is not None else ""
            more = "".join(f", {f}" for f in fraction)
            return f"trajectory on {self.scheme} (strength={c.strength}, beta={c.beta}{extend}{more}){where}"
        options = [f"{k}={v}" for k, v in c.scheme_options.items()] + fraction
        if options:
            return f"{c.encoding} ({', '.join(options)}){where}"
        return (c.encoding if c.encoding != NATIVE else f"{NATIVE} ({self.scheme})") + where


def check_materialized(model: nn.Module) -> None:
    """Refuse a model whose weights were never loaded (meta tensors): the patch reads the embeddings, the
    position table and the rotary buffers, which hold no values there."""
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise ValueError(
            f"this {type(model).__name__} has its weights on the meta device (built without values, e.g. under "
            "init_empty_weights or device_map='meta'), and hf_trajpe reads the weights when patching. Load the "
            "weights first (from_pretrained without device_map='meta', or to_empty() then load_state_dict()), "
            "then patch"
        )


def _hook(scheme_cls, family: FamilyAdapter) -> str:
    provides = family.provides
    if scheme_cls.contributes == "additive":
        return "table" if "table" in provides else "embeddings"
    if scheme_cls.contributes == "rotary":
        return "rotary" if "rotary" in provides else "attention"
    if scheme_cls.contributes in ("bias", "score", "remap"):
        return "attention"
    return "none"


def resolve_plan(config: PatchConfig, model: nn.Module) -> PatchPlan:
    """Check ``config`` against ``model`` (a transformers ``PreTrainedModel``) and decide everything.

    Raises ``NotImplementedError`` for what the model cannot do (family, attention implementation,
    rotary type) and ``ValueError`` for options that do not fit it; returns the plan otherwise. The
    model is not modified.
    """
    model_config = model.config
    check_materialized(model)
    family = adapter_for(model)
    base = model.base_model
    if config.encoding not in family.encodings:
        raise ValueError(
            f"{family.name} does not support encoding {config.encoding!r}; supported: {', '.join(family.encodings)}"
        )
    source = SOURCES.get(config.encoding)
    trajectory = source is not None
    if trajectory:
        on = config.options[source.base_option]
        if on is not None and on not in family.trajectory_bases:
            raise ValueError(
                f"{family.name} does not support {config.encoding} on {on!r}; supported bases: "
                f"{', '.join(family.trajectory_bases)}"
            )
        name = on or family.native
    else:
        name = family.native if config.encoding == NATIVE else config.encoding
    scheme_cls = get_scheme(name)
    runs = f"{config.encoding} on {name!r}" if trajectory else repr(name)
    refuse_undeclared(config.model_options(), name,
                      f"{config.encoding!r} (this patch runs {runs}, {family.name}'s own scheme)")
    causal = bool(family.causal(model_config))
    if not scheme_cls.bidirectional and not causal:
        raise ValueError(f"{name} is defined for causal attention only; this {family.name} model is bidirectional")
    interpolation = check_interpolation(name, config.interpolation) if trajectory else None

    # the position limit: where a learned table ends, or what the user asked for; else none
    table_offset = int(family.table_offset(model_config)) if family.table_path else 0
    max_positions = config.max_positions
    if scheme_cls.reads_table:
        table_rows = get_path(base, family.table_path)[2].num_embeddings - table_offset
        if max_positions is not None and max_positions > table_rows:
            raise ValueError(
                f"max_positions={max_positions} exceeds the learned table ({table_rows} rows); to run "
                "longer sequences patch to 'rope', 'alibi', 'sinusoidal' or 'none' (or trajectory on those)"
            )
        max_positions = max_positions or table_rows

    hook = _hook(scheme_cls, family)
    if config.rotary_fraction is not None:
        if not family.self_attention:
            raise NotImplementedError(
                f"rotary_fraction rotates part of each head inside attention, through hf_trajpe's attention "
                f"functions, which {family.name} does not run (its positions are computed in the model's own code); "
                "patch it without rotary_fraction")
        hook = "attention"  # the model's own rotation (if any) is switched off; ours runs inside attention
    attn_stock = model_config._attn_implementation
    if hook == "attention" and attn_stock not in ATTENTION_NAMES:
        desc = f"trajectory on {name}" if trajectory else config.encoding
        raise NotImplementedError(
            f"{desc} needs a bias or rotary inside attention, available for attention implementations "
            f"{', '.join(ATTENTION_NAMES)}; this model uses {attn_stock!r} "
            "(load it with attn_implementation='sdpa' or 'eager')"
        )
    impls = scheme_cls.attention_implementations
    if hook == "attention" and attn_stock not in impls:
        why = getattr(scheme_cls, "attention_refusals", {}).get(attn_stock)  # e.g. cope on flex_attention
        raise NotImplementedError(
            f"{name} is implemented for attention implementations {', '.join(impls)} only; this model uses "
            f"{attn_stock!r}{f' ({name}: {why})' if why else ''} (load it with attn_implementation="
            f"{' or '.join(map(repr, impls))}, or call model.set_attn_implementation(...) before patching)"
        )
    rotary = get_path(base, family.rotary_path)[2] if family.rotary_path else None
    if rotary is not None:
        rope_types = getattr(rotary, "rope_type", "default")  # a dict per layer type in some models
        for rope_type in rope_types.values() if isinstance(rope_types, dict) else (rope_types,):
            if rope_type not in ROTARY_TYPES:
                raise NotImplementedError(
                    f"rope_type {rope_type!r} of {type(rotary).__name__} is not one hf_trajpe reproduces; "
                    f"supported rope types: {', '.join(ROTARY_TYPES)}"
                )
        scheme_cls.check_rope_types(name, rope_types, config.rope_parameters)
    attention = self_attention_modules(base, family.self_attention)
    head_dim = _head_dim(attention, model_config)
    scaling = None
    if config.rope_parameters is not None:
        scaling = _rope_scaling(config, model_config, family, name, hook, rotary, head_dim)
        config = config.replace(rope_parameters=scaling.given)
    own = {o.name: config.options[o.name] for o in scheme_cls.options if o.name in config.options}
    settled = scheme_cls.resolve_values(own, model)  # (after rope_parameters: a remap's defaults follow its length)
    if settled != own:  # (sinusoid_scale="embeddings" becomes the number it stands for)
        config = config.replace(**{k: v for k, v in settled.items() if v != own[k]})
    rope_theta, rotary_width = float(config.rope_theta), None
    if config.rotary_fraction is not None:
        rotary_width = _rotary_width(config.rotary_fraction, head_dim, family)
        if rotary is not None:
            rope_theta = _model_rope_theta(model_config)
    layers = None
    if config.layers is not None:
        layers = _check_layers(config, family, name, scheme_cls, hook, attention)
    else:
        scheme_cls.check_attention_modules(name, attention)
    plan = PatchPlan(
        config=config, family=family, scheme=name, trajectory=trajectory, interpolation=interpolation,
        causal=causal, width=int(model_config.hidden_size), table_offset=table_offset,
        max_positions=max_positions, hook=hook, attn_stock=attn_stock,
        sinusoid_scale=float(config.sinusoid_scale), rope_theta=rope_theta,
        head_dim=head_dim, attention_modules=len(attention) if layers is None else len(layers),
        rope_scaling=scaling, layers=layers, rotary_width=rotary_width,
        trained_length=(trained_length(model_config) if scaling is None
                        else extended_length(scaling.given, model_config)),
    )
    scheme_cls.check_model(plan)
    return plan


def _rotary_width(fraction: float, head_dim: int | None, family: FamilyAdapter) -> int:
    """The rotated dimensions of a head for ``rotary_fraction``: ``int(head_dim * fraction)``, as GPT-NeoX and
    Phi compute theirs; it must be even (dimensions turn in pairs) and at least 2."""
    if head_dim is None:
        raise NotImplementedError(f"{family.name}: cannot tell the attention head width for rotary_fraction")
    width = int(head_dim * fraction)
    if width < 2 or width % 2:
        raise ValueError(f"rotary_fraction={fraction:g} of a head of {head_dim} dimensions rotates {width}; the "
                         "rotated width must be even and at least 2 (dimensions turn in pairs): choose a fraction "
                         f"with int({head_dim} * fraction) even")
    return width


def _model_rope_theta(model_config) -> float:
    """The ``rope_theta`` of a model with a rotary module, for ``rotary_fraction``'s default frequencies."""
    stock = dict(getattr(model_config, "rope_parameters", None) or {})
    if any(isinstance(v, dict) for v in stock.values()):
        raise NotImplementedError(f"{model_config.model_type}: rotary parameters differ per layer type in this model; "
                                  "rotary_fraction applies to models with one set: patch it without rotary_fraction")
    rope_type = stock.get("rope_type", "default")
    if rope_type != "default":
        raise NotImplementedError(
            f"rotary_fraction recomputes default rotary frequencies at the model's rope_theta; this "
            f"{model_config.model_type} uses rope_type {rope_type!r}, whose frequencies depend on the rotated "
            "width in their own way: patch it without rotary_fraction")
    theta = stock.get("rope_theta", getattr(model_config, "rope_theta", None))
    return float(theta) if theta is not None else 10000.0


def _check_layers(config: PatchConfig, family: FamilyAdapter, name: str, scheme_cls, hook: str,
                  attention: list[nn.Module]) -> tuple[int, ...]:
    """The layer indices of ``config.layers`` on this model, or a refusal saying why a layer selection cannot
    apply here (docs/patching.md, "Layer selections")."""
    if not family.takes_layers:
        why = ("its own encoding is a learned position table added once to the input embeddings, so no layer has "
               "an encoding of its own to swap" if family.table_path else
               "its positions are computed in its own code, not given to each attention layer")
        raise NotImplementedError(
            f"{family.name}: a layer selection needs a model whose own encoding acts inside every attention layer "
            f"through a shared rotary module (Llama, Mistral, Qwen, Gemma, GPT-NeoX, Phi, SmolLM3, ...); {why}. "
            "Patch it without layers")
    if scheme_cls.contributes == "additive":
        raise ValueError(f"{name} is added once to the input embeddings, before the first layer, so it cannot be "
                         "given to some layers only: patch it without layers")
    if config.rope_parameters is not None:
        raise ValueError("rope_parameters extends the whole model's context (config.max_position_embeddings follows "
                         "it), not some layers: give it without layers")
    refused = sorted({type(m).__name__ for m in attention
                      if "position_embeddings" not in inspect.signature(type(m).forward).parameters})
    if refused:
        raise NotImplementedError(f"{family.name}: its attention ({', '.join(refused)}) takes no position_embeddings "
                                  "argument, through which a layer selection gives each layer its own rotation")
    indices = resolve_selection(config.layers, len(attention))
    if hook == "rotary":
        unrotated = [i for i in indices if not getattr(attention[i], "use_rope", True)]
        if unrotated:
            raise ValueError(
                f"layers {describe_layers(unrotated)} of this {family.name} apply no rotation of their own (its "
                f"no_rope_layers), so {name} through the model's rotary path would do nothing there; give "
                "rotary_fraction=1.0 (the rotation then runs inside attention), or leave those layers out")
    return indices


def _rope_scaling(config: PatchConfig, model_config, family: FamilyAdapter, name: str, hook: str, rotary,
                  head_dim: int | None) -> RopeScaling:
    """The context extension of ``config.rope_parameters`` resolved against the model, or a refusal saying why."""
    if hook == "rotary" or get_scheme(name).contributes == "remap":  # (a remap: the model's rotary, in attention)
        if rotary is None:
            raise NotImplementedError(f"{family.name} computes its rotation in its own code; context extension needs "
                                      "a rotary module that transformers builds from config.rope_parameters")
        if isinstance(getattr(rotary, "rope_type", None), dict):
            raise NotImplementedError(f"{type(rotary).__name__} keeps rotary parameters per layer type; context "
                                      "extension applies to models with one set")
        inv_freq, _ = rotary_frequencies(rotary)
        return resolve_rope_parameters(config.rope_parameters, model_config, 2 * inv_freq.numel())
    if head_dim is None:
        raise NotImplementedError(f"{family.name}: cannot tell the attention head width for the rotation")
    given = dict(config.rope_parameters)
    given.setdefault("rope_theta", float(config.rope_theta))  # the rotation inside attention uses rope_theta
    return resolve_rope_parameters(given, _NoRope(model_config), head_dim)


class _NoRope:
    """A model config seen without its rotary settings (a model without a rotary module has none to keep)."""

    def __init__(self, model_config) -> None:
        self.model_type = model_config.model_type
        self.max_position_embeddings = getattr(model_config, "max_position_embeddings", None)
        self.rope_parameters = None


def plan_strength(plan: PatchPlan) -> nn.Module | None:
    """The strength module of a trajectory plan (validated when the config was built)."""
    return make_strength(plan.config.strength, plan.config.learnable_strength) if plan.trajectory else None
