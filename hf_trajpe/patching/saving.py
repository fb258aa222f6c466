"""The ``save_pretrained`` a patched model gets: the stock save (weights and config exactly as unpatched)
plus the patch files (:mod:`.persistence`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from torch import nn

from .handle import save_patch
from .persistence import MODULE_NAME, SAVE_ID_KEY

__all__ = ["make_save_pretrained"]


def make_save_pretrained(model: nn.Module, attn_stock: str) -> Callable:
    stock_save = type(model).save_pretrained

    def save_pretrained(save_directory, *args, **kwargs):
        """Stock ``save_pretrained`` (weights and config exactly as unpatched) plus
        ``hf_trajpe_config.json`` and the patch state; reload with ``hf_trajpe.from_pretrained``. Plain
        transformers loads the stock model from the folder (with the ``rope_parameters`` extension, if any): an
        encoding has no ``config.json`` form, and a remap of relative positions (``self_extend``, ``rerope``,
        ``dca``, ``string``) cannot be expressed there at all.

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
