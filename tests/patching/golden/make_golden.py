"""Write the golden logits of every (family, encoding) cell: ``python tests/patching/golden/make_golden.py``.

They were generated once from the engine before it was split into plug-in encodings, and
``test_golden.py`` asserts that every cell still gives them bit for bit (float32). Regenerate only
when a change of results is intended, and say so in the commit.

Per cell: a left-padded batch of two (logits of real tokens), the same batch with ``use_cache`` and
one decoding step after it (logits of the step), on eager and sdpa attention.
"""

from __future__ import annotations

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/patching, for patch_models

from patch_models import CAUSAL, FAMILIES, build, cell, cells_for  # noqa: E402

import hf_trajpe  # noqa: E402
from hf_trajpe.compat import cache_kwarg, output_cache  # noqa: E402

FILE = os.path.join(HERE, "logits.safetensors")

#: variants beyond the support-table cells: options that take other code paths
EXTRA = {
    "trajectory/sinusoidal:linear": ("trajectory", {"base": "sinusoidal", "strength": 0.5, "interpolation": "linear"}),
    "trajectory/rope:cubic": ("trajectory", {"base": "rope", "strength": 0.5, "interpolation": "cubic"}),
    "trajectory:learnable": ("trajectory", {"strength": 0.3, "learnable_strength": True}),
    "trajectory:auto": ("trajectory", {"strength": "auto"}),
    "sinusoidal:embeddings": ("sinusoidal", {"sinusoid_scale": "embeddings"}),
}
EXTRA_LEARNED = {
    "trajectory/learned:cubic": ("trajectory", {"base": "learned", "strength": 0.5, "interpolation": "cubic"}),
}
LEARNED = ("gpt2", "bert", "roberta")


def all_cells(family: str) -> dict[str, tuple[str, dict]]:
    out = {name: cell(name) for name in cells_for(family)}
    out.update(EXTRA)
    if family in LEARNED:
        out.update(EXTRA_LEARNED)
    return out


def inputs(model) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 128, (2, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding
    ids[1, :4] = int(model.config.pad_token_id)
    return ids, mask


def run_cell(family: str, attn: str, encoding: str, opts: dict) -> dict[str, torch.Tensor]:
    model = build(family, attn)
    ids, mask = inputs(model)
    out = {}
    with hf_trajpe.patch(model, encoding, **opts), torch.no_grad():
        res = model(input_ids=ids, attention_mask=mask)
        logits = res.logits
        out["full"] = torch.cat([logits[0], logits[1, 4:]])  # real tokens only
        if family in CAUSAL:
            res = model(input_ids=ids, attention_mask=mask, use_cache=True)
            nxt = torch.tensor([[5], [9]])
            step = model(input_ids=nxt, attention_mask=torch.cat([mask, torch.ones_like(nxt)], 1),
                         **{cache_kwarg(): output_cache(res)}, use_cache=True)
            out["step"] = step.logits[:, -1]
    return out


def generate() -> dict[str, torch.Tensor]:
    tensors = {}
    for family in FAMILIES:
        for attn in ("eager", "sdpa"):
            for name, (enc, opts) in all_cells(family).items():
                for kind, t in run_cell(family, attn, enc, opts).items():
                    tensors[f"{family}|{attn}|{name}|{kind}"] = t.contiguous()
    return tensors


if __name__ == "__main__":
    from safetensors.torch import save_file

    tensors = generate()
    save_file(tensors, FILE)
    print(f"wrote {len(tensors)} tensors to {FILE}")
