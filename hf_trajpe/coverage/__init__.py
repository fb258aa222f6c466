"""The coverage sweep: which transformers model types hf_trajpe patches correctly, checked, not listed.

``tiny_model`` builds a model type from a tiny config; ``check_model_type`` patches it with every
encoding its structure allows and records each check; ``scripts/support_sweep.py`` runs them all and
writes docs/support.md and ``hf_trajpe/patching/families/supported.py``.
"""

from .checks import CHECKS, CellResult, check_model_type
from .tiny import model_types, tiny_model

__all__ = ["CHECKS", "CellResult", "check_model_type", "model_types", "tiny_model"]
