"""Saving and reloading a patch: ``hf_trajpe_config.json`` plus ``hf_trajpe_state.safetensors`` (the
learnable state, if any) beside the weights. This module is the only writer and reader of both files.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from torch import nn

from .config import CONFIG_NAME, PatchConfig

__all__ = ["MODULE_NAME", "STATE_NAME", "save_patch", "load_patch", "from_pretrained", "make_save_pretrained"]

#: file of the patch's learnable state (the strength, ...)
STATE_NAME = "hf_trajpe_state.safetensors"
#: name of the state module on a patched model (``model.hf_trajpe``)
MODULE_NAME = "hf_trajpe"


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
        try:
            stock_save(model, save_directory, *args, **kwargs)
        finally:
            model.config._attn_implementation_internal = attn_now
            model._modules[MODULE_NAME] = state
        if kwargs.get("is_main_process", True):
            save_patch(model, save_directory)

    return save_pretrained


def save_patch(model: nn.Module, directory: str | os.PathLike) -> None:
    """Write ``hf_trajpe_config.json`` (and the learnable state, if any) into ``directory``."""
    from .api import get_handle

    handle = get_handle(model)
    if handle is None:
        raise ValueError("this model is not patched by hf_trajpe; nothing to save")
    handle.config.save(directory)
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
    handle = patch(model, config)
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
    return handle


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
    model = load_model(path, model_class, **kwargs)
    load_patch(model, path)
    return model
