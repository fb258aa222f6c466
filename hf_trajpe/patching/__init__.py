"""Swap the positional encoding of a pretrained transformers model in place (docs/patching.md).

How the engine is laid out (each file one concept):

- ``config.py``: :class:`PatchConfig`, the user's options, validated and saved as JSON.
- ``schemes/``: the positional schemes as registered plug-ins (learned table, sinusoidal, RoPE, ALiBi,
  NoPE, CoPE), each declaring what it contributes, what it can do and its options; trajectory's options
  (``schemes/trajectory.py``); which encoding takes which option (``schemes/encodings.py``).
- ``families/``: where a model keeps its positions, found from its structure (overrides by ``model_type``).
- ``plan.py``: :func:`resolve_plan`, the one place that turns options and a model into a plan.
- ``sources.py``: where positions come from (integer ranks, or trajectory).
- ``state.py``: the per-model state; ``modules.py``: the replacement table and rotary modules;
  ``attention.py``: the attention functions registered with transformers; ``hooks.py``: the forward hooks.
- ``layers.py``: layer selections (``layers="every:4"``); ``layer_map.py``: several patches on disjoint layers
  as one value; ``layer_hooks.py``: the per-layer rotation of a layer selection.
- ``api.py``, ``handle.py``: patch/unpatch, the handles and the installation; ``persistence.py``, ``saving.py``,
  ``reload.py``: the patch files, ``save_pretrained``, reloading.

``import hf_trajpe.patching`` stays light: transformers is imported only when a model is patched.
"""

from .api import LayerMapHandle, PatchHandle, get_handle, patch, unpatch
from .attention import register_attention
from .config import CONFIG_NAME, ENCODINGS, TRAJECTORY_BASES, PatchConfig
from .families import OVERRIDES, SUPPORTED, SUPPORTED_LAYERS, FamilyAdapter, adapter_for, register_override
from .handle import save_patch
from .layer_map import LayerMap, load_config
from .layers import normalize_selection, resolve_selection
from .persistence import STATE_NAME
from .plan import PatchPlan, resolve_plan
from .reload import from_pretrained, load_patch
from .schemes import SCHEMES, Scheme, register_scheme
from .schemes.remap.units import boundary_ids as unit_boundary_ids

__all__ = [
    "patch",
    "unpatch",
    "get_handle",
    "from_pretrained",
    "load_patch",
    "save_patch",
    "PatchConfig",
    "PatchHandle",
    "LayerMap",
    "LayerMapHandle",
    "load_config",
    "normalize_selection",
    "resolve_selection",
    "SUPPORTED",
    "SUPPORTED_LAYERS",
    "register_attention",
    "OVERRIDES",
    "CONFIG_NAME",
    "ENCODINGS",
    "adapter_for",
    "FamilyAdapter",
    "PatchPlan",
    "SCHEMES",
    "STATE_NAME",
    "Scheme",
    "TRAJECTORY_BASES",
    "register_override",
    "register_scheme",
    "resolve_plan",
    "unit_boundary_ids",
]
