"""Reloading a saved patch into a model: :func:`load_patch` (a stock model loaded with the Auto class, plus
this call) and :func:`from_pretrained` (both at once). Above :mod:`.api`: reloading is patching with what
was saved."""

from __future__ import annotations

import json
import os

from torch import nn

from .api import patch
from .config import CONFIG_NAME
from .layer_map import load_config
from .persistence import SAVE_ID_KEY, STATE_NAME, check_same_save

__all__ = ["from_pretrained", "load_patch"]


def load_patch(model: nn.Module, directory: str | os.PathLike):
    """Patch a freshly loaded stock model as saved in ``directory``: the Auto class plus this call.

    Everything is read before the model is touched, and a failure after patching undoes the patch, so
    on any error the model is as it was. A patch with learned state (a learnable strength, ...) refuses a
    folder without its state file: loading the initial values instead would silently change the model.
    """
    config = load_config(directory)  # one patch, or a layer map of several
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
    load_config(path)  # no patch saved there: say so before the weights are read
    config_json = os.path.join(path, "config.json")
    if os.path.isfile(config_json):
        with open(config_json, encoding="utf-8") as fh:
            check_same_save(path, json.load(fh).get(SAVE_ID_KEY), strict=True)
    model = load_model(path, model_class, **kwargs)
    load_patch(model, path)
    return model
