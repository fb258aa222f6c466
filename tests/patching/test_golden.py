"""Every (family, encoding) cell gives the logits stored in golden/logits.safetensors, bit for bit.

The stored logits come from the engine as it was before encodings became plug-ins
(golden/make_golden.py says how they are made); any change of a number here is a change of behaviour.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))

from make_golden import FILE, all_cells, run_cell  # noqa: E402
from patch_models import FAMILIES  # noqa: E402

CASES = [(f, a, name) for f in FAMILIES for a in ("eager", "sdpa") for name in all_cells(f)]


@pytest.fixture(scope="module")
def golden() -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(FILE)


def test_every_cell_has_golden_logits(golden):
    expected = {k.rsplit("|", 1)[0] for k in golden}
    assert expected == {f"{f}|{a}|{n}" for f, a, n in CASES}


@pytest.mark.parametrize("family,attn,name", CASES, ids=["|".join(c) for c in CASES])
def test_logits_equal_the_golden_ones(golden, family, attn, name):
    enc, opts = all_cells(family)[name]
    got = run_cell(family, attn, enc, opts)
    for kind, tensor in got.items():
        torch.testing.assert_close(tensor, golden[f"{family}|{attn}|{name}|{kind}"], rtol=0, atol=0,
                                   msg=lambda m, k=kind: f"{family} {attn} {name} ({k}): {m}")
