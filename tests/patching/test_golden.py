"""Every (family, encoding) cell gives the logits stored in golden/logits.safetensors, within float32 rounding.

The stored logits come from the engine as it was before encodings became plug-ins
(golden/make_golden.py says how they are made, and how to regenerate them:
``python tests/patching/golden/make_golden.py``); any change beyond rounding is a change of behaviour.

Why a tolerance: numbers stored on one machine are compared on others, and float32 results differ between
CPU vendors and vector kernels (the same logits on an Intel and an AMD CPU differ by about 1e-7). Each cell
is compared at ``atol = GOLDEN_EPS * eps32 * max|logit|`` of that cell, ``rtol = 0``. Measured worst case on
an AMD EPYC against logits made on an Intel Xeon (docs/notes.md): 6.1 eps32 of the scale with
``ATEN_CPU_CAPABILITY=default``, 3.3 with ``avx2`` or the default kernels, with 1 and 2 threads alike.
64 leaves a tenfold margin and is still 7.6e-6 of the scale, far below what a change of positions does
(trajectory at strength 0.5 instead of 0 moves the largest logit difference by 4e-3 of the scale on Llama,
5e-1 on GPT-2 and BERT). Equality inside one
process (patched ``native`` against stock, unpatch, reload) is tested exactly elsewhere.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))

from make_golden import FILE, all_cells, run_cell  # noqa: E402
from patch_models import FAMILIES  # noqa: E402

#: tolerance in float32 epsilons of each cell's largest |logit| (module docstring)
GOLDEN_EPS = 64

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
        want = golden[f"{family}|{attn}|{name}|{kind}"]
        atol = GOLDEN_EPS * torch.finfo(torch.float32).eps * want.abs().max().item()
        torch.testing.assert_close(tensor, want, rtol=0, atol=atol,
                                   msg=lambda m, k=kind, a=atol: f"{family} {attn} {name} ({k}, atol {a:.2e}): {m}")
