"""Where a forward keeps the model's rotary frequencies for a scheme that rotates inside attention at positions
of its own (the remaps): the rotary stand-ins (modules.py, layer_hooks.py) record them per layer type in
``Step.memo`` under :data:`ROTARY_FREQUENCIES`, and the scheme reads them back by the names of a layer's type.
"""

from __future__ import annotations

__all__ = ["ROTARY_FREQUENCIES", "layer_type_names"]

#: ``Step.memo`` key (with the layer type, ``None`` for a rotary module with one set of frequencies) of the model's
#: rotary frequencies ``(inv_freq, attention_scaling)`` in this forward, put there by the rotary stand-ins when the
#: rotation runs inside attention at remapped positions
ROTARY_FREQUENCIES = "rotary_frequencies"


def layer_type_names(module) -> tuple[str | None, ...]:
    """The names under which ``module``'s layer type may key its frequencies, where the rotary module keeps one set
    per layer type: Gemma 3's ``layer_type``, OLMo 3's ``attention_type``, else ``config.layer_types[layer_idx]``."""
    types = getattr(getattr(module, "config", None), "layer_types", None)
    index = getattr(module, "layer_idx", None)
    return (getattr(module, "layer_type", None), getattr(module, "attention_type", None),
            types[index] if types is not None and isinstance(index, int) and index < len(types) else None)

