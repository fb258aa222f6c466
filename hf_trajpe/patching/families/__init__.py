"""Model families keyed by ``config.model_type``. Adding a family = one small module + one line here."""

from __future__ import annotations

from . import bert, gpt2, gpt_neox, llama
from .adapter import FamilyAdapter

__all__ = ["ADAPTERS", "FAMILIES", "SUPPORTED", "FamilyAdapter", "get_adapter"]

FAMILIES: tuple[FamilyAdapter, ...] = (gpt2.ADAPTER, bert.BERT, bert.ROBERTA, llama.ADAPTER, gpt_neox.ADAPTER)

ADAPTERS: dict[str, FamilyAdapter] = {t: a for a in FAMILIES for t in a.model_types}

#: model_type -> encodings it supports, from what each family offers and what each scheme needs
#: (``trajectory`` bases per family: ``ADAPTERS[t].trajectory_bases``)
SUPPORTED: dict[str, tuple[str, ...]] = {t: a.encodings for t, a in ADAPTERS.items()}


def get_adapter(model_type: str) -> FamilyAdapter:
    try:
        return ADAPTERS[model_type]
    except KeyError:
        raise NotImplementedError(
            f"hf_trajpe has no adapter for model_type {model_type!r}; supported model types: "
            f"{', '.join(sorted(ADAPTERS))}"
        ) from None
