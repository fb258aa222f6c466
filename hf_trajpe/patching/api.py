"""``patch``/``unpatch``: the plugin API (the handle and where it lives: ``handle.py``; saving: ``saving.py``
and ``persistence.py``; reloading, which patches: ``reload.py``).

Instances only: a class is never modified, so an unpatched model of the same class in the same
process is untouched. Every change is recorded in the handle and undone by ``unpatch``; every check
happens in :func:`~.plan.resolve_plan` before the first change.
"""

from __future__ import annotations

import copy
import functools

from torch import nn

from ..compat import check_transformers_version
from .attention import bind_attention_modules, register_attention
from .config import PatchConfig
from .handle import HANDLE_ATTR, PatchHandle, get_handle, target_model
from .hooks import make_post_hook, make_pre_hook
from .modules import PatchedPositionTable, PatchedRotary
from .persistence import MODULE_NAME
from .plan import ATTENTION_NAMES, get_path, resolve_plan
from .rope_scaling import extend_config, scaled_rotary_module
from .saving import make_save_pretrained
from .state import STATE_ATTR, PatchState

__all__ = ["PatchHandle", "patch", "unpatch", "get_handle", "STATE_ATTR"]


def _config(encoding: str | PatchConfig, options: dict) -> PatchConfig:
    if isinstance(encoding, PatchConfig):
        if options:
            raise TypeError("pass either a PatchConfig or an encoding name with options, not both")
        return encoding
    return PatchConfig.from_options(encoding, **options)


def patch(model: nn.Module, encoding: str | PatchConfig = "native", **options) -> PatchHandle:
    """Swap the positional encoding of ``model`` in place; returns a :class:`PatchHandle`.

    ``encoding``: ``native``, ``sinusoidal``, ``rope``, ``alibi``, ``none``, ``cope`` or ``trajectory``
    (or a ready :class:`PatchConfig`); ``options``: the other fields of :class:`PatchConfig`, and the
    options the chosen scheme declares (``npos_max`` for ``cope``; :meth:`PatchConfig.from_options`).
    """
    check_transformers_version()
    model = target_model(model)
    config = _config(encoding, options)
    if get_handle(model) is not None:
        raise RuntimeError("this model is already patched; call hf_trajpe.unpatch(model) first")
    plan = resolve_plan(config, model)  # every refusal happens here, before any change
    base = model.base_model
    family = plan.family
    state = PatchState(plan, family.eager_attention(base) if plan.uses_attention else None)
    param = next(model.parameters(), None)
    if param is not None:
        state.to(device=param.device)

    handle = PatchHandle(model, plan.config, state)
    _install(model, handle)
    return handle


def _install(model: nn.Module, handle: PatchHandle) -> None:
    """Wire ``handle.state`` into ``model``; each change's undo step goes to ``handle._undo``. On failure
    everything done so far is undone and the handle is inactive. Also called again on a model whose
    handle was detached (:func:`_deepcopy_patched`), with the same state."""
    state, plan = handle.state, handle.plan
    base = model.base_model
    family = plan.family
    undo = handle._undo
    try:
        model.add_module(MODULE_NAME, state)
        undo.append(lambda: model._modules.pop(MODULE_NAME, None))
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
            register_attention()
            model.set_attn_implementation(ATTENTION_NAMES[plan.attn_stock])
            undo.append(lambda: model.set_attn_implementation(plan.attn_stock))
            bind_attention_modules(base, family.self_attention, state)
            undo.append(lambda: bind_attention_modules(base, family.self_attention, None))
        runner = get_path(base, family.runner_path)[2] if family.runner_path else base
        pre = runner.register_forward_pre_hook(
            make_pre_hook(state, runner, model.config, model.get_input_embeddings()), with_kwargs=True)
        post = runner.register_forward_hook(make_post_hook(state), with_kwargs=True, always_call=True)
        undo.append(pre.remove)
        undo.append(post.remove)
        undo.extend(family.install(model, state))  # last: an override's own hooks run after the engine's
        instance = {
            "save_pretrained": make_save_pretrained(model, plan.attn_stock),
            # copies, pickles and attention switches that would otherwise lose or share the patch
            "__deepcopy__": functools.partial(_deepcopy_patched, model),
            "__reduce_ex__": functools.partial(_refuse_pickle, model),
            "set_attn_implementation": functools.partial(_set_attn_implementation, model, plan),
            HANDLE_ATTR: handle,
        }
        for key, value in instance.items():
            model.__dict__[key] = value
            undo.append(lambda key=key: model.__dict__.pop(key, None))
    except Exception:
        handle.unpatch()
        raise


def _deepcopy_patched(model: nn.Module, memo: dict) -> nn.Module:
    """``copy.deepcopy`` of a patched model: an independent patched copy with its own state (a copy of the
    original's: the strength, learned or not, the displacement cache) and its own handle.

    The original's patch is taken off while the stock model is copied and put back with the same state
    and handle, so the copy shares nothing with it; ``get_handle(copy)`` unpatches the copy alone."""
    handle = get_handle(model)
    state = handle.state
    memo.setdefault(id(state.plan), state.plan)  # immutable: shared
    if state.tokenizer is not None:
        memo.setdefault(id(state.tokenizer), state.tokenizer)  # read-only here: shared
    handle._detach()
    try:
        clone = copy.deepcopy(model, memo)
    finally:
        _install(model, handle)
    clone_handle = PatchHandle(clone, handle.config, copy.deepcopy(state, memo))
    _install(clone, clone_handle)
    return clone


def _refuse_pickle(model: nn.Module, protocol: int):
    raise TypeError(
        f"a {type(model).__name__} patched by hf_trajpe cannot be pickled (torch.save(model), copy.copy): the patch "
        "lives in hooks and replaced modules of this process. Save it with model.save_pretrained(folder) (the "
        "weights plus the patch; reload with hf_trajpe.from_pretrained(folder)), or save the weights "
        "(torch.save(model.state_dict(), path)) and the patch (hf_trajpe.save_patch(model, folder)); "
        "copy.deepcopy(model) gives an independent patched copy"
    )


def _set_attn_implementation(model: nn.Module, plan, attn_implementation, *args, **kwargs):
    """``model.set_attn_implementation`` while patched: a plan whose scheme runs inside attention keeps it
    (asking for the stock implementation it wraps changes nothing) and refuses any other one, which would
    drop the encoding silently; other plans pass the call through."""
    stock = type(model).set_attn_implementation
    if not plan.uses_attention:
        return stock(model, attn_implementation, *args, **kwargs)
    ours = ATTENTION_NAMES[plan.attn_stock]
    requested = (attn_implementation.get("", ours) if isinstance(attn_implementation, dict)
                 else attn_implementation)
    if requested in (plan.attn_stock, ours) and not isinstance(attn_implementation, dict):
        return None
    raise ValueError(
        f"this model is patched with {plan.describe()}, which runs inside attention through hf_trajpe's "
        f"{ours!r} (wrapping {plan.attn_stock!r}); switching to {attn_implementation!r} would drop the encoding. "
        "Unpatch, switch, then patch again: hf_trajpe.unpatch(model); model.set_attn_implementation(...); "
        "hf_trajpe.patch(model, ...)"
    )


def unpatch(model_or_handle: nn.Module | PatchHandle) -> None:
    """Restore the stock model (same modules, attention implementation and outputs)."""
    if isinstance(model_or_handle, PatchHandle):
        model_or_handle.unpatch()
        return
    handle = get_handle(model_or_handle)
    if handle is None:
        raise ValueError("this model is not patched by hf_trajpe")
    handle.unpatch()
