"""The patch files: ``hf_trajpe_config.json`` plus ``hf_trajpe_state.safetensors`` (the learnable state, if
any) beside the weights, their names and the checks of a folder that holds them. This module writes both
files; :mod:`.reload` reads them back into a model (it needs :func:`~.api.patch`, which needs this module).
"""

from __future__ import annotations

import json
import os

from .config import CONFIG_NAME, PatchConfig
from .layer_map import LayerMap

__all__ = ["MODULE_NAME", "SAVE_ID_KEY", "STATE_NAME", "check_same_save", "resolved_config", "write_patch"]

#: file of the patch's learnable state (the strength, ...)
STATE_NAME = "hf_trajpe_state.safetensors"
#: name of the state module on a patched model (``model.hf_trajpe``)
MODULE_NAME = "hf_trajpe"
#: key of ``config.json`` holding the id of the ``save_pretrained`` that wrote it beside the patch files (the
#: same id is in ``hf_trajpe_config.json``): a later save of an unpatched model rewrites ``config.json``
#: without it, which marks the patch files left there as stale. Plain transformers loads it as an attribute.
SAVE_ID_KEY = "hf_trajpe_save_id"


def resolved_config(handle) -> PatchConfig:
    """The config to save: trajectory on the model's own scheme names that scheme as its ``base``, so a
    reload into a model of another family reproduces the saved patch or is refused, never silently
    runs on that family's own scheme."""
    config = handle.config
    if handle.plan.trajectory and config.base is None:
        config = config.replace(base=handle.plan.scheme)
    return config


def write_patch(handles, directory: str | os.PathLike, save_id: str | None = None) -> None:
    """Write ``hf_trajpe_config.json`` (and the learnable state, if any) of the patches of a model (``handles``,
    in the order of its installation) into ``directory``: one config, or a layer map of several; the state
    keys are those of ``model.hf_trajpe`` (``<i>.<name>`` for several)."""
    if len(handles) == 1:
        (handle,) = handles
        resolved_config(handle).save(directory, save_id=save_id)
        state = handle.state.state_dict()
    else:
        LayerMap(tuple(resolved_config(h) for h in handles)).save(directory, save_id=save_id)
        state = {f"{i}.{k}": v for i, h in enumerate(handles) for k, v in h.state.state_dict().items()}
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    path = os.path.join(directory, STATE_NAME)
    if tensors:
        from safetensors.torch import save_file

        save_file(tensors, path)
    elif os.path.exists(path):
        os.remove(path)


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
