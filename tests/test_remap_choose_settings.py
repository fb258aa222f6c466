"""The settings rule of the SmolLM2 remap comparison (scripts/remap_choose_settings.py): its largest mapped
distance against the papers' formulas (tests/patching/remap_reference.py), the fit to a longer length, the choice."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "patching"))
from remap_reference import dca, rerope, self_extend, string  # noqa: E402

spec = importlib.util.spec_from_file_location("remap_choose_settings", ROOT / "scripts" / "remap_choose_settings.py")
choose_settings = importlib.util.module_from_spec(spec)
spec.loader.exec_module(choose_settings)

TRAINED = 64
FORMULAS = {"self_extend": (self_extend, {"group_size": 8, "window": 1024}),
            "rerope": (rerope, {"window": 512, "leak": None}),
            "dca": (dca, {"chunk_size": 3 * TRAINED // 4, "local_window": TRAINED // 8}),
            "string": (string, {"shift": int(0.33 * TRAINED), "local_window": min(128, int(0.33 * TRAINED) // 2)})}


@pytest.mark.parametrize("options", [
    {"encoding": "self_extend", "group_size": 4, "window": 16},
    {"encoding": "self_extend", "group_size": 3, "window": 8},
    {"encoding": "rerope", "window": 16}, {"encoding": "rerope", "window": 16, "leak": 4},
    {"encoding": "dca"}, {"encoding": "dca", "chunk_size": 40, "local_window": 8},
    {"encoding": "string"}, {"encoding": "string", "shift": 50, "local_window": 8},
    {"encoding": "string", "shift": 150, "local_window": 8}])
def test_the_largest_distance_is_the_formulas_maximum(options):
    n = 200
    i, j = np.tril_indices(n)
    formula, defaults = FORMULAS[options["encoding"]]
    kwargs = {**defaults, **{k: v for k, v in options.items() if k != "encoding"}}
    assert choose_settings.largest_distance(options, n, TRAINED) == pytest.approx(formula(i, j, **kwargs).max())


def test_fitting_keeps_what_fits_and_brings_the_rest_inside_the_limit():
    fit = choose_settings.fit_to_length
    assert fit({"encoding": "self_extend", "group_size": 8, "window": 1024}, 32768, 8192)["group_size"] == 8
    assert fit({"encoding": "self_extend", "group_size": 4, "window": 1024}, 32768, 8192)["group_size"] == 8
    fitted = fit({"encoding": "string", "shift": 4000, "local_window": 128}, 16000, 8192)
    assert fitted["shift"] == 8192 and choose_settings.largest_distance(fitted, 16000, 8192) < 8192
    with pytest.raises(ValueError, match="at most 16256 tokens"):  # a constant shift cannot cover 4x
        fit({"encoding": "string", "shift": 8320, "local_window": 128}, 32768, 8192)
    over_yarn = {"encoding": "string", "rope_parameters": {"rope_type": "yarn", "factor": 4}}
    assert choose_settings.largest_distance(fit(over_yarn, 32768, 8192), 32768, 8192) < 32768


def test_the_choice_is_the_lowest_perplexity_past_the_trained_length():
    def entry(inside, past):
        return {"windows": {"all": [{"low": 0.0, "high": 1.0, "ppl": inside},
                                    {"low": 1.0, "high": 1.5, "ppl": past}, {"low": 1.5, "high": 2.0, "ppl": past}]}}

    report = {"trained_length": 64,
              "models": {"a": entry(1.0, 9.0), "b": entry(50.0, 8.0), "c": entry(1.0, 2.0)},
              "patches": {"a": {"encoding": "rerope"}, "b": {"encoding": "rerope", "window": 4},
                          "c": {"encoding": "dca"}}}
    best = choose_settings.choose(report)
    assert {m: name for m, (name, _, _) in best.items()} == {"rerope": "b", "dca": "c"}
    assert best["rerope"][2] == pytest.approx(8.0)
