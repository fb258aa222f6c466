"""``patch``/``unpatch``: the plugin API (the handle and where it lives: ``handle.py``; saving: ``saving.py``
and ``persistence.py``; reloading, which patches: ``reload.py``).

Instances only: a class is never modified, so an unpatched model of the same class in the same
process is untouched. Every change is recorded in the model's :class:`~.handle.Installation` and undone by
``unpatch``; every check happens in :func:`~.plan.resolve_plan` before the first change.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping

from torch import nn

from ..compat import check_transformers_version
from .attention import INDEX_ATTR, bind_attention_modules, cache_layers, register_attention
from .checkpointing import CheckpointSwitch
from .config import PatchConfig
from .families import adapter_for
from .handle import HANDLE_ATTR, Installation, LayerMapHandle, PatchHandle, get_handle, target_model
from .hooks import make_post_hook, make_pre_hook
from .layer_hooks import layer_type_of, make_layer_hook
from .layer_map import LayerMap
from .layers import as_callable, describe_layers, overlap, resolve_selection
from .modules import PatchedPositionTable, PatchedRotary
from .persistence import MODULE_NAME
from .plan import ATTENTION_NAMES, PatchPlan, get_path, resolve_plan, self_attention_modules
from .rope_scaling import extend_config, scaled_rotary_module
from .saving import make_save_pretrained
from .state import MEMORY_ATTR, STATE_ATTR, PatchState, PatchStates, bind_state

__all__ = ["LayerMapHandle", "PatchHandle", "patch", "unpatch", "get_handle", "STATE_ATTR"]


def _config(encoding: str | PatchConfig, options: dict) -> PatchConfig:
    if isinstance(encoding, PatchConfig):
        if options:
            raise TypeError("pass either a PatchConfig or an encoding name with options, not both")
        return encoding
    return PatchConfig.from_options(encoding, **options)


def patch(model: nn.Module, encoding: str | PatchConfig | Mapping | LayerMap = "native",
          **options) -> PatchHandle | LayerMapHandle:
    """Swap the positional encoding of ``model`` in place; returns a :class:`PatchHandle`.

    ``encoding``: ``native``, ``sinusoidal``, ``rope``, ``alibi``, ``none``, ``cope``, ``trajectory``, or a remap
    of the model's own rotary (``self_extend``, ``rerope``, ``dca``, ``string``) (or a ready :class:`PatchConfig`);
    ``options``: ``max_positions``, ``layers``, and the options the chosen encoding declares (trajectory's
    ``strength``, ..., its base's, ``npos_max`` for ``cope``, ``group_size`` and ``window`` for ``self_extend``;
    the table of docs/patching.md, "Options per scheme"); an option of another encoding is refused, whatever its
    value.
    ``layers=``: the attention layers to patch (a list of indices, a slice, ``"every:4"``, ``"top:8"``,
    ``"0-3,7"`` or a callable ``(index, n_layers) -> bool``; :mod:`~.layers`); the others keep the model's own
    encoding. Patches on disjoint layers compose: call ``patch`` again with other layers (one handle each), or
    give a layer map ``{selection: encoding or {"encoding": ..., **options}}`` as ``encoding`` (one
    :class:`LayerMapHandle` for all of it).
    """
    check_transformers_version()
    model = target_model(model)
    as_map = isinstance(encoding, (Mapping, LayerMap))
    if as_map and options:
        raise TypeError("a layer map carries its own layers and options: give them in its entries "
                        "({selection: {'encoding': name, **options}}), not as keywords")
    current: Installation | None = model.__dict__.get(HANDLE_ATTR)
    if current is not None:
        whole = next((h for h in current.handles if h.plan.layers is None), None)
        every = not as_map and options.get("layers") is None and getattr(encoding, "layers", None) is None
        if whole is not None or every:
            on = "; ".join(h.plan.describe() for h in current.handles)
            raise RuntimeError(f"this model is already patched ({on}); a patch of every layer does not compose "
                               "with others: call hf_trajpe.unpatch(model) first")
        current.detach()  # the stock model: the new patches are resolved against it, then all are installed
    try:
        resolve = functools.partial(_resolve_callable, model)
        if as_map:
            configs = list(LayerMap.from_spec(encoding, resolve).configs)
        else:
            if as_callable(options.get("layers")) is not None:
                options = {**options, "layers": resolve(options["layers"])}
            configs = [_config(encoding, options)]
        plans = [resolve_plan(c, model) for c in configs]  # every refusal happens here, before any change
        _check_disjoint(plans, current.handles if current is not None else [])
    except Exception:
        if current is not None:
            current.install()
        raise
    handles = [_handle(model, plan) for plan in plans]
    installation = Installation(model, (current.handles if current is not None else []) + handles, _install)
    try:
        installation.install()
    except Exception:
        if current is not None:
            current.install()
        raise
    return LayerMapHandle(handles) if as_map else handles[0]


def _resolve_callable(model: nn.Module, fn) -> tuple[int, ...]:
    """The layer indices a callable selection picks on ``model`` (its self-attention modules, in model order)."""
    family = adapter_for(model)
    return resolve_selection(fn, len(self_attention_modules(model.base_model, family.self_attention)))


def _check_disjoint(plans: list[PatchPlan], installed: list[PatchHandle]) -> None:
    """Refuse layer selections that overlap (among the new patches, or with the model's patches), naming the layers."""
    seen: list[tuple[str, tuple[int, ...]]] = [(h.plan.describe(), h.plan.layers) for h in installed]
    for plan in plans:
        for what, layers in seen:
            shared = overlap(plan.layers, layers)
            if shared:
                which = f"layers {describe_layers(shared)} are" if len(shared) > 1 else f"layer {shared[0]} is"
                raise ValueError(
                    f"{which} selected twice: by {plan.describe()} and by {what}; "
                    "layer selections of one model must be disjoint (unpatch the other patch first, or choose "
                    "other layers)")
        seen.append((plan.describe(), plan.layers))


def _handle(model: nn.Module, plan: PatchPlan) -> PatchHandle:
    family = plan.family
    state = PatchState(plan, family.eager_attention(model.base_model) if plan.uses_attention else None)
    param = next(model.parameters(), None)
    if param is not None:
        state.to(device=param.device)
    return PatchHandle(model, plan.config, state)


def _install(installation: Installation) -> None:
    """Wire the states of ``installation.handles`` into the model; each change's undo step goes to
    ``installation.undo``. A patch of every layer replaces the model's position table or rotary module and
    binds every self-attention module; patches with layer selections hook their layers (layer_hooks.py) and bind
    theirs, and the model's own rotary module serves the other layers. On failure everything done so far is
    undone. Also called again with the same states (another patch added or removed, a deep copy)."""
    model, handles, undo = installation.model, installation.handles, installation.undo
    states = [h.state for h in handles]
    lead = handles[0].plan
    base = model.base_model
    family = lead.family
    layered = lead.layers is not None
    try:
        model.add_module(MODULE_NAME, states[0] if len(states) == 1 else PatchStates(states))
        undo.append(lambda: model._modules.pop(MODULE_NAME, None))
        for i, state in enumerate(states):
            state.memory_key = MEMORY_ATTR if i == 0 else f"{MEMORY_ATTR}_{i}"
        if layered:
            _install_layers(model, handles, undo)
        else:
            _install_whole(model, handles[0], undo)
        if any(h.plan.uses_attention and family.self_attention for h in handles):  # (an override: its own code)
            register_attention()
            model.set_attn_implementation(ATTENTION_NAMES[lead.attn_stock])
            undo.append(lambda: model.set_attn_implementation(lead.attn_stock))
        runner = get_path(base, family.runner_path)[2] if family.runner_path else base
        switch = CheckpointSwitch(runner, states)
        pre = runner.register_forward_pre_hook(
            make_pre_hook(states, runner, model.config, model.get_input_embeddings(), switch,
                          rank_position_ids=layered),
            with_kwargs=True)
        post = runner.register_forward_hook(make_post_hook(states, switch), with_kwargs=True, always_call=True)
        undo.append(pre.remove)
        undo.append(post.remove)
        if not layered:
            undo.extend(family.install(model, states[0]))  # last: an override's own hooks run after the engine's
        instance = {
            "save_pretrained": make_save_pretrained(model, lead.attn_stock),
            # copies, pickles and attention switches that would otherwise lose or share the patch
            "__deepcopy__": functools.partial(_deepcopy_patched, model),
            "__reduce_ex__": functools.partial(_refuse_pickle, model),
            "set_attn_implementation": functools.partial(_set_attn_implementation, model, [h.plan for h in handles]),
            HANDLE_ATTR: installation,
        }
        for key, value in instance.items():
            model.__dict__[key] = value
            undo.append(lambda key=key: model.__dict__.pop(key, None))
    except Exception:
        installation.detach()
        raise


def _install_whole(model: nn.Module, handle: PatchHandle, undo: list) -> None:
    """A patch of every layer: the position table or rotary module replaced, every self-attention module bound."""
    state, plan = handle.state, handle.plan
    base = model.base_model
    family = plan.family
    for path, cls in ((family.table_path, PatchedPositionTable), (family.rotary_path, PatchedRotary)):
        if path is None:
            continue
        parent, name, stock = get_path(base, path)
        if cls is PatchedRotary and plan.rope_scaling is not None:
            replacement = PatchedRotary(stock, state, scaled_rotary_module(stock, model.config, plan.rope_scaling))
        else:
            replacement = cls(stock, state)
        setattr(parent, name, replacement)
        undo.append(lambda parent=parent, name=name, stock=stock: setattr(parent, name, stock))
    if plan.rope_scaling is not None and family.rotary_path:
        undo.append(extend_config(model.config, plan.rope_scaling))
    if plan.uses_attention and family.self_attention:  # (an override may put its bias in itself: install)
        bind_attention_modules(base, family.self_attention, state)
        undo.append(lambda: bind_attention_modules(base, family.self_attention, None))


def _install_layers(model: nn.Module, handles: list[PatchHandle], undo: list) -> None:
    """Patches with layer selections: each selected attention module gets its patch's rotation through a
    pre-hook (layer_hooks.py) and, where the patch runs inside attention, its state (numbered in the order of the
    patch's layers). The model's rotary module stays: it serves the layers no selection names."""
    base = model.base_model
    family = handles[0].plan.family
    attention = self_attention_modules(base, family.self_attention)
    rotary = get_path(base, family.rotary_path)[2]
    for handle in handles:
        for number, index in enumerate(handle.plan.layers):
            module = attention[index]
            hook = make_layer_hook(handle.state, module, rotary, layer_type_of(rotary, model.config, index))
            undo.append(module.register_forward_pre_hook(hook, with_kwargs=True).remove)
            if handle.plan.uses_attention:
                bind_state(module, handle.state)
                module.__dict__[INDEX_ATTR] = number
                undo.append(lambda module=module: (bind_state(module, None), module.__dict__.pop(INDEX_ATTR, None)))
        if handle.plan.uses_attention:  # the KV cache keeps these layers' keys rotated (cached_keys.py)
            handle.state.cache_layers = cache_layers(handle.state, [attention[i] for i in handle.plan.layers])


def _deepcopy_patched(model: nn.Module, memo: dict) -> nn.Module:
    """``copy.deepcopy`` of a patched model: an independent patched copy with its own states (copies of the
    original's: the strength, learned or not, the displacement cache) and its own handles.

    The original's patches are taken off while the stock model is copied and put back with the same states
    and handles, so the copy shares nothing with it; ``get_handle(copy)`` unpatches the copy alone."""
    installation: Installation = model.__dict__[HANDLE_ATTR]
    for handle in installation.handles:
        memo.setdefault(id(handle.state.plan), handle.state.plan)  # immutable: shared
        if handle.state.tokenizer is not None:
            memo.setdefault(id(handle.state.tokenizer), handle.state.tokenizer)  # read-only here: shared
    installation.detach()
    try:
        clone = copy.deepcopy(model, memo)
    finally:
        installation.install()
    handles = [PatchHandle(clone, h.config, copy.deepcopy(h.state, memo)) for h in installation.handles]
    Installation(clone, handles, _install).install()
    return clone


def _refuse_pickle(model: nn.Module, protocol: int):
    raise TypeError(
        f"a {type(model).__name__} patched by hf_trajpe cannot be pickled (torch.save(model), copy.copy): the patch "
        "lives in hooks and replaced modules of this process. Save it with model.save_pretrained(folder) (the "
        "weights plus the patch; reload with hf_trajpe.from_pretrained(folder)), or save the weights "
        "(torch.save(model.state_dict(), path)) and the patch (hf_trajpe.save_patch(model, folder)); "
        "copy.deepcopy(model) gives an independent patched copy"
    )


def _set_attn_implementation(model: nn.Module, plans: list, attn_implementation, *args, **kwargs):
    """``model.set_attn_implementation`` while patched: patches whose scheme runs inside attention keep it
    (asking for the stock implementation it wraps changes nothing) and refuse any other one, which would
    drop the encoding silently; other patches pass the call through."""
    stock = type(model).set_attn_implementation
    inside = [p for p in plans if p.uses_attention]
    if not inside:
        return stock(model, attn_implementation, *args, **kwargs)
    plan = inside[0]
    ours = ATTENTION_NAMES[plan.attn_stock]
    requested = (attn_implementation.get("", ours) if isinstance(attn_implementation, dict)
                 else attn_implementation)
    if requested in (plan.attn_stock, ours) and not isinstance(attn_implementation, dict):
        return None
    raise ValueError(
        f"this model is patched with {'; '.join(p.describe() for p in inside)}, which runs inside attention through "
        f"hf_trajpe's {ours!r} (wrapping {plan.attn_stock!r}); switching to {attn_implementation!r} would drop the "
        "encoding. "
        "Unpatch, switch, then patch again: hf_trajpe.unpatch(model); model.set_attn_implementation(...); "
        "hf_trajpe.patch(model, ...)"
    )


def unpatch(model_or_handle: nn.Module | PatchHandle | LayerMapHandle) -> None:
    """Restore the stock model (same modules, attention implementation and outputs): every patch of a model, or
    the patch(es) of one handle (the model's other patches stay in force)."""
    if isinstance(model_or_handle, (PatchHandle, LayerMapHandle)):
        model_or_handle.unpatch()
        return
    handle = get_handle(model_or_handle)
    if handle is None:
        raise ValueError("this model is not patched by hf_trajpe")
    handle.unpatch()
