"""Where the fine-tuning recipe is and the environment it is launched in, for what runs it as a child process
(the recovery study, ``hf-trajpe extend --finetune``): ``accelerate launch`` starts fresh interpreters, which must
import this hf_trajpe, not another one on the path.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["checkout", "recipe_env", "recipe_path"]


def checkout() -> Path:
    """The folder holding this ``hf_trajpe`` package (a checkout: with ``recipes/`` and ``configs/`` beside it)."""
    return Path(__file__).resolve().parents[2]


def recipe_path() -> Path:
    """``recipes/finetune.py`` of this checkout; a ``FileNotFoundError`` saying what to do where there is none."""
    recipe = checkout() / "recipes" / "finetune.py"
    if not recipe.is_file():
        raise FileNotFoundError(f"the fine-tuning recipe recipes/finetune.py is not at {recipe}: it comes with a "
                                "checkout of hf_trajpe; install from the repository (pip install -e .)")
    return recipe


def recipe_env() -> dict:
    """The environment of the processes started here: the hf_trajpe of this process first on the path."""
    path = os.pathsep.join(filter(None, [str(checkout()), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
