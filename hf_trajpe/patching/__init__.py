"""Swap the positional encoding of a pretrained transformers model in place (docs/patching.md).

``import hf_trajpe.patching`` stays light: transformers is imported only when a model is patched.
"""

from .api import PatchHandle, from_pretrained, get_handle, load_patch, patch, save_patch, unpatch
from .config import CONFIG_NAME, ENCODINGS, TRAJECTORY_BASES, PatchConfig
from .registry import ADAPTERS, FAMILIES, SUPPORTED, get_adapter

__all__ = [
    "ADAPTERS",
    "CONFIG_NAME",
    "ENCODINGS",
    "FAMILIES",
    "SUPPORTED",
    "TRAJECTORY_BASES",
    "PatchConfig",
    "PatchHandle",
    "from_pretrained",
    "get_adapter",
    "get_handle",
    "load_patch",
    "patch",
    "save_patch",
    "unpatch",
]
