"""Model families: adapters built from each model's structure (``structure.py``), with hand-written
overrides (``OVERRIDES``, keyed by ``model_type``) only where a model deviates from what the structure
says: GPT-J (``gptj.py``: sin/cos buffers in every layer), BLOOM and MPT (``bloom.py``, ``mpt.py``: ALiBi
built in the model's forward), each an :class:`~.override.OverrideAdapter` that installs itself.
``SUPPORTED`` (and ``SUPPORTED_LAYERS``, the model types that take layer selections) comes from the coverage
sweep (``scripts/support_sweep.py`` writes ``supported.py`` and docs/support.md), not from a hand list.
"""

from __future__ import annotations

from torch import nn

from .adapter import FamilyAdapter
from .bloom import BLOOM
from .gptj import GPTJ
from .mpt import MPT
from .override import OverrideAdapter
from .structure import StructureError, adapter_from_structure
from .supported import SUPPORTED, SUPPORTED_LAYERS

__all__ = ["OVERRIDES", "SUPPORTED", "SUPPORTED_LAYERS", "FamilyAdapter", "OverrideAdapter", "StructureError",
           "adapter_for", "register_override"]

#: model_type -> hand-written adapter, for models whose structure misleads (registered below)
OVERRIDES: dict[str, FamilyAdapter] = {}


def register_override(adapter: FamilyAdapter) -> FamilyAdapter:
    """Use ``adapter`` instead of the structure for its ``model_types``."""
    for model_type in adapter.model_types:
        OVERRIDES[model_type] = adapter
    return adapter


def adapter_for(model: nn.Module) -> FamilyAdapter:
    """The adapter of a transformers model: its override, or one built from its structure (raises
    ``StructureError``, a ``NotImplementedError``, saying what the model lacks)."""
    override = OVERRIDES.get(model.config.model_type)
    return override if override is not None else adapter_from_structure(model)


for _adapter in (GPTJ, BLOOM, MPT):
    register_override(_adapter)
