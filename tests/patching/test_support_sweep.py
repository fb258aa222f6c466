"""The coverage sweep: support found by structure, checked per model type (docs/support.md)."""

from __future__ import annotations

import pytest

import hf_trajpe
from hf_trajpe.coverage import check_model_type, model_types
from hf_trajpe.patching import SUPPORTED, SUPPORTED_LAYERS

#: model types users bring that the sweep must keep green (the last two through the sweep's own eyes; gptj, bloom
#: and mpt through their family overrides)
NAMED = ["gemma", "gemma2", "gemma3_text", "phi", "phi3", "olmo2", "starcoder2", "mixtral", "qwen2_moe", "granite",
         "stablelm", "smollm3", "falcon", "opt", "gpt2", "llama", "qwen3", "mistral", "gptj", "bloom", "mpt"]
MASKED = ["distilbert", "modernbert", "bert", "roberta"]


def _green(model_type: str, task: str) -> list[str]:
    cells, why = check_model_type(model_type, task)
    assert why is None, f"{model_type}: {why}"
    bad = {c.encoding: c.error or [k for k, v in c.checks.items() if v is False] for c in cells if not c.green}
    assert not bad, f"{model_type}: {bad}"
    return [c.encoding for c in cells]


@pytest.mark.parametrize("model_type,task", [("opt", "clm"), ("gemma3_text", "clm"), ("distilbert", "mlm")])
def test_structures_that_differ_from_the_first_families_are_green(model_type, task):
    """OPT (hooks on its decoder, table offset 2), Gemma 3 (rotary frequencies per layer type),
    DistilBERT (a masked LM with its own table): a few seconds each."""
    encodings = _green(model_type, task)
    assert "native" in encodings and any(e.startswith("trajectory/") for e in encodings)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", NAMED)
def test_named_causal_model_types_are_green(model_type):
    _green(model_type, "clm")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MASKED)
def test_named_masked_model_types_are_green(model_type):
    _green(model_type, "mlm")


def test_supported_comes_from_the_sweep():
    """``SUPPORTED`` is written by scripts/support_sweep.py: at least 40 model types, each a real one."""
    import json
    from pathlib import Path

    import transformers

    known = {t for _, t in model_types()}
    assert len(SUPPORTED) >= 40
    swept = json.loads((Path(__file__).resolve().parents[2] / "docs/results/support.json").read_text())["transformers"]
    missing = set(SUPPORTED) - known
    if transformers.__version__ == swept:
        assert not missing
    else:  # an older release of the tested window lacks model types added later; the rest must be real
        assert len(missing) <= 10, f"{sorted(missing)} are not model types of transformers {transformers.__version__}"
    for model_type, encodings in SUPPORTED.items():
        assert encodings and set(encodings) <= set(hf_trajpe.patching.ENCODINGS), model_type
    for model_type in ("gpt2", "llama", "gemma3_text", "opt", "distilbert", "modernbert"):
        assert {"native", "rope", "trajectory"} <= set(SUPPORTED[model_type]), model_type
    assert {"llama", "gemma3_text", "smollm3", "gpt_neox", "phi", "modernbert"} <= SUPPORTED_LAYERS <= set(SUPPORTED)
    assert not {"gpt2", "bert", "opt", "gptj", "bloom", "mpt"} & SUPPORTED_LAYERS  # no layer has its own encoding
