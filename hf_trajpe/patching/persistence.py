"""Saving and reloading a patch: ``hf_trajpe_config.json`` plus ``hf_trajpe_state.safetensors`` (the
learnable state, if any) beside the weights. This module is the only writer and reader of both files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable

from torch import nn

from .config import CONFIG_NAME, PatchConfig

__all__ = ["MODULE_NAME", "SAVE_ID_KEY", "STATE_NAME", "save_patch", "load_patch", "from_pretrained",
           "make_save_pretrained"]

#: file of the patch's learnable state (the strength, ...)
STATE_NAME = "hf_trajpe_state.safetensors"
#: name of the state module on a patched model (``model.hf_trajpe``)
MODULE_NAME = "hf_trajpe"
#: key of ``config.json`` holding the id of the ``save_pretrained`` that wrote it beside the patch files (the
#: same id is in ``hf_trajpe_config.json``): a later save of an unpatched model rewrites ``config.json``
#: without it, which marks the patch files left there as stale. Plain transformers loads it as an attribute.
SAVE_ID_KEY = "hf_trajpe_save_id"


def make_save_pretrained(model: nn.Module, attn_stock: str) -> Callable:
    stock_save = type(model).save_pretrained

    def save_pretrained(save_directory, *args, **kwargs):
        """Stock ``save_pretrained`` (weights and config exactly as unpatched) plus
        ``hf_trajpe_config.json`` and the patch state; reload with ``hf_trajpe.from_pretrained``.

        A model loaded from a ``.gguf`` file with plain transformers keeps a GGUF quantizer over weights
        that are already dense, and transformers refuses to save it; that leftover is removed first, as
        :func:`hf_trajpe.loading.load_model` does at load time (packed weights are refused by name)."""
        from ..loading import drop_gguf_quantizer, has_gguf_quantizer

        if has_gguf_quantizer(model):
            drop_gguf_quantizer(model, getattr(model.config, "_name_or_path", None) or "the model")
        state_dict = kwargs.get("state_dict")
        if state_dict is not None:
            prefix = MODULE_NAME + "."
            kwargs["state_dict"] = {k: v for k, v in state_dict.items() if not k.startswith(prefix)}
        state = model._modules.pop(MODULE_NAME)
        attn_now = model.config._attn_implementation
        model.config._attn_implementation_internal = attn_stock
        save_id, previous = uuid.uuid4().hex, model.config.__dict__.get(SAVE_ID_KEY)
        setattr(model.config, SAVE_ID_KEY, save_id)  # ties config.json to the patch files of this save
        try:
            stock_save(model, save_directory, *args, **kwargs)
        finally:
            model.config._attn_implementation_internal = attn_now
            model._modules[MODULE_NAME] = state
            if previous is None:
                model.config.__dict__.pop(SAVE_ID_KEY, None)
            else:
                setattr(model.config, SAVE_ID_KEY, previous)
        if kwargs.get("is_main_process", True):
            save_patch(model, save_directory, _save_id=save_id)

    return save_pretrained


def resolved_config(handle) -> PatchConfig:
    """The config to save: trajectory on the model's own scheme names that scheme as its ``base``, so a
    reload into a model of another family reproduces the saved patch or is refused, never silently
    runs on that family's own scheme."""
    config = handle.config
    if handle.plan.trajectory and config.base is None:
        config = dataclasses.replace(config, base=handle.plan.scheme)
    return config


def save_patch(model: nn.Module, directory: str | os.PathLike, *, _save_id: str | None = None) -> None:
    """Write ``hf_trajpe_config.json`` (and the learnable state, if any) into ``directory``."""
    from .api import get_handle

    handle = get_handle(model)
    if handle is None:
        raise ValueError("this model is not patched by hf_trajpe; nothing to save")
    resolved_config(handle).save(directory, save_id=_save_id)
    tensors = {k: v.detach().contiguous().cpu() for k, v in handle.state.state_dict().items()}
    path = os.path.join(directory, STATE_NAME)
    if tensors:
        from safetensors.torch import save_file

        save_file(tensors, path)
    elif os.path.exists(path):
        os.remove(path)


def load_patch(model: nn.Module, directory: str | os.PathLike):
    """Patch a freshly loaded stock model as saved in ``directory``: the Auto class plus this call.

    Everything is read before the model is touched, and a failure after patching undoes the patch, so
    on any error the model is as it was. A patch with learned state (a learnable strength, ...) refuses a
    folder without its state file: loading the initial values instead would silently change the model.
    """
    from .api import patch

    config = PatchConfig.load(directory)
    check_same_save(directory, model.config.__dict__.get(SAVE_ID_KEY), strict=False)
    path = os.path.join(directory, STATE_NAME)
    tensors = None
    if os.path.exists(path):
        from safetensors.torch import load_file

        param = next(model.parameters(), None)
        try:
            tensors = load_file(path, device=str(param.device) if param is not None else "cpu")
        except Exception as exc:
            raise ValueError(f"cannot read the patch state {path}: {exc} (the file is damaged; copy it again "
                             "from where the model was saved)") from exc
        bad = sorted(k for k, v in tensors.items() if v.is_floating_point() and not bool(v.isfinite().all()))
        if bad:
            raise ValueError(f"the patch state {path} holds NaN or infinite values ({', '.join(bad)}): the file is "
                             "damaged, or was saved from a run that diverged; copy it again from where the model "
                             "was saved, or patch the stock model afresh")
    try:
        handle = patch(model, config)
    except (ValueError, NotImplementedError) as exc:
        raise type(exc)(f"the patch saved in {os.fspath(directory)!r} does not fit this "
                        f"{type(model).__name__}: {exc}") from None
    try:
        learned = [name for name, _ in handle.state.named_parameters()]
        if tensors is None and learned:
            raise FileNotFoundError(
                f"{path} is missing, but the patch saved in {os.fspath(directory)!r} has learned state "
                f"({', '.join(learned)}); without it the model would run with the initial values. Copy "
                f"{STATE_NAME} along with the model, or patch the stock model afresh to start over"
            )
        if tensors is not None:
            try:
                handle.state.load_state_dict(tensors)
            except RuntimeError as exc:
                raise ValueError(f"the patch state {path} does not fit the patch in "
                                 f"{CONFIG_NAME}: {exc}") from exc
    except Exception:
        handle.unpatch()
        raise
    model.config.__dict__.pop(SAVE_ID_KEY, None)  # read; a later save of this model writes its own
    return handle


def check_same_save(directory: str | os.PathLike, config_id: str | None, strict: bool) -> None:
    """Refuse patch files that an earlier save left beside weights saved later by a model that was not
    patched (``config_id``: the save id of ``config.json``). A patch file without an id (``save_patch``
    alone, or an older hf_trajpe) is accepted; ``strict``: the weights are known to come from ``directory``,
    so a ``config.json`` without an id is a later plain save too."""
    path = os.path.join(directory, CONFIG_NAME)
    with open(path, encoding="utf-8") as fh:
        patch_id = json.load(fh).get("save_id")
    if patch_id is None or patch_id == config_id or (config_id is None and not strict):
        return
    raise ValueError(
        f"{path} (and {STATE_NAME}, if any) were left by an earlier save: config.json and the weights in "
        f"{os.fspath(directory)!r} were saved later, by a model that was not patched, so loading them patched "
        "would change that model. Load it without the patch (transformers' from_pretrained), or delete the stale "
        "patch files; to keep a patch, save the patched model again"
    )


def from_pretrained(directory: str | os.PathLike, model_class=None, **kwargs) -> nn.Module:
    """Load a model saved from a patched model, patched again (``kwargs`` go to ``from_pretrained``).

    ``model_class`` defaults to the class named in ``config.json``'s ``architectures``. The weights are
    read by :func:`hf_trajpe.loading.load_model`, so ``directory`` may also be a ``.gguf`` file (or
    ``package:<module>/<file>.gguf``): a GGUF file holds no patch, so that model comes back unpatched
    (dequantized, and saving like any model): patch it with ``hf_trajpe.patch``; the folder its
    ``save_pretrained`` writes reloads here patched.
    """
    from ..loading import is_gguf, load_model, resolve_source

    path = resolve_source(directory)
    if is_gguf(path):
        return load_model(path, model_class, **kwargs)
    PatchConfig.load(path)  # no patch saved there: say so before the weights are read
    config_json = os.path.join(path, "config.json")
    if os.path.isfile(config_json):
        with open(config_json, encoding="utf-8") as fh:
            check_same_save(path, json.load(fh).get(SAVE_ID_KEY), strict=True)
    model = load_model(path, model_class, **kwargs)
    load_patch(model, path)
    return model
