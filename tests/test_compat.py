"""hf_trajpe.compat: the tested window, what differs between releases, and no library warnings from the
project's own calls."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import pytest
import tomllib
import torch

import hf_trajpe
from hf_trajpe import compat

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    out = {}
    for req in reqs:
        match = re.match(r"([A-Za-z0-9_.-]+)(.*)", req)
        out[match.group(1).lower()] = match.group(2).strip()
    return out


@pytest.mark.parametrize("package", sorted(compat.TESTED))
def test_pyproject_requires_the_oldest_tested_release_and_caps_nothing(package):
    """A lower bound only: installing hf_trajpe into an environment with a newer release keeps it (the window's
    newest end is constraints.txt's pin, and patch() warns outside the window)."""
    low, _ = compat.TESTED[package]
    assert _requirements()[package] == f">={low}", (
        f"pyproject.toml must require {package}>={low} (hf_trajpe/compat.py TESTED's oldest end) and no upper "
        "bound: change both after make test-compat")


def test_constraints_pin_the_newest_end_of_the_window():
    pins = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    for package, (_, high) in compat.TESTED.items():
        assert pins[package] == high, f"constraints.txt pins {package} {pins[package]}, the window ends at {high}"
    assert "torch" not in pins, "constraints.txt must leave torch alone (an installed CUDA build is kept)"


def test_version_tuple_reads_the_release_part():
    assert compat.version_tuple("5.24.0") == (5, 24, 0)
    assert compat.version_tuple("5.25.0.dev0") == (5, 25, 0)
    assert compat.version_tuple("5.24.0rc1") == (5, 24, 0)
    assert compat.version_tuple("6") == (6,)


@pytest.mark.parametrize("version,warns", [("5.22.2", True), ("5.23.0", False), ("5.24.0", False),
                                           ("5.24.1", True), ("5.25.0.dev0", True), ("6.0.0", True)])
def test_patch_warns_once_outside_the_tested_window(monkeypatch, version, warns):
    monkeypatch.setattr(compat, "transformers_version", lambda: version)
    monkeypatch.setattr(compat, "_warned", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compat.check_transformers_version()
        compat.check_transformers_version()
    messages = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    if warns:
        assert len(messages) == 1, messages
        low, high = compat.TESTED_TRANSFORMERS
        assert f"tested with transformers {low} to {high}" in messages[0] and version in messages[0]
    else:
        assert messages == []


def test_the_cache_is_passed_and_read_under_the_installed_name():
    import inspect

    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    name = compat.cache_kwarg()
    for cls in (GPT2LMHeadModel, LlamaForCausalLM):
        assert name in inspect.signature(cls.forward).parameters
    assert compat.cache_from_kwargs({"cache": 1}) == 1 and compat.cache_from_kwargs({"past_key_values": 2}) == 2
    assert compat.cache_from_kwargs({}) is None


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_patched_decoding_and_training_calls_raise_no_library_warning(family):
    """Cached forwards as the tests and benchmarks make them, generate(), and a loss with labels: transformers
    must neither warn (FutureWarning: a renamed argument) nor log ("loss_type=None", "past_key_values
    deprecated") because of how the project calls it."""
    from transformers.utils import logging as hf_logging

    from hf_trajpe.benchmarks.setup import SIZES, build_model

    size = SIZES["tiny"]
    records = _Records()
    once = getattr(logging.Logger, "warning_once", None)  # transformers' once-per-process warnings, seen afresh
    if hasattr(once, "cache_clear"):
        once.cache_clear()
    logger = hf_logging.get_logger("transformers")
    logger.addHandler(records)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            model = build_model(family, size)
            ids = torch.randint(3, 60, (2, 6))
            with hf_trajpe.patch(model, "trajectory", strength=0.2), torch.no_grad():
                out = model(input_ids=ids, use_cache=True)
                cache = compat.output_cache(out)
                model(input_ids=ids[:, :1], **{compat.cache_kwarg(): cache}, use_cache=True)
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False)
                model(input_ids=ids, labels=ids)
    finally:
        logger.removeHandler(records)
    assert records.messages == []
