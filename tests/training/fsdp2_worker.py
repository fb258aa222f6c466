"""Run by tests/training/test_distributed.py under torchrun: a patched tiny GPT-2 (trajectory, learnable
strength) sharded with torch FSDP2 (fully_shard) on CPU/gloo, both ranks training on the same batch, so
the result must equal single-process training (see ``train_reference``)."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

STEPS = 3


def build():
    from transformers import GPT2Config, GPT2LMHeadModel

    import hf_trajpe

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=259, attn_pdrop=0.0,
                     resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=1, eos_token_id=1)
    model = GPT2LMHeadModel(cfg)
    hf_trajpe.patch(model, "trajectory", strength=0.3, learnable_strength=True)
    return model


def batch() -> torch.Tensor:
    return torch.randint(3, 259, (4, 32), generator=torch.Generator().manual_seed(1))


def train(model) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = batch()
    out = []
    for _ in range(STEPS):
        loss = model(input_ids=x, labels=x, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(float(loss.detach()))
    return out


def train_reference() -> tuple[list[float], float]:
    model = build()
    return train(model), float(model.hf_trajpe.strength.value.detach())


def main(out_dir: str) -> None:
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    model = build()
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    raw = model.hf_trajpe.strength.raw
    sharded = type(raw).__name__
    losses = train(model)
    strength = float(torch.sigmoid(raw.full_tensor()).reshape(()))
    result = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "losses": losses,
              "strength": strength, "raw_type": sharded}
    with open(os.path.join(out_dir, f"fsdp2_rank_{dist.get_rank()}.json"), "w") as fh:
        json.dump(result, fh)
    dist.barrier()  # both ranks done with gloo before either tears it down (a teardown race can abort one)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
