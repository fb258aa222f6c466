"""Produce docs/sample_report/: train tiny GPT-2s with different positional encodings, then evaluate.

    HF_HUB_OFFLINE=1 python scripts/sample_report.py                       # about 10-15 min on 2 CPU cores
    HF_HUB_OFFLINE=1 python scripts/sample_report.py --steps 50 --out /tmp/r  # a quick smoke run

1. ``hf_trajpe.data.save_all``: every content type, ``--train`` train documents and 200 test
   documents (seed 0), saved under ``RUNS/data``. Training reads only the train splits; the test
   splits are disjoint from them (code: different stdlib files).
2. For each encoding and seed: a GPT-2 (2 layers, 64 wide, 4 heads, dropout 0, 512 positions,
   byte-level vocabulary of 259), patched with ``hf_trajpe.patch`` unless ``native`` (GPT-2's
   learned table), trained from scratch for ``--steps`` AdamW steps on 128-token blocks drawn
   from the train splits of all seven types mixed, saved with ``save_pretrained`` under ``RUNS``.
3. ``evaluate_models`` on the saved folders (loaded back with ``hf_trajpe.from_pretrained``), at
   128, 256 and 512 tokens, baseline ``native``; ``write_report`` into ``--out``.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

ENCODINGS = {"native": {}, "alibi": {}, "rope": {}, "sinusoidal": {}, "trajectory": {"strength": 0.2}}


def tiny_gpt2(seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=259, n_positions=512, n_embd=64, n_layer=2, n_head=4, bos_token_id=1,
                     eos_token_id=1, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def train_blocks(data: dict, tokenizer, block_size: int) -> torch.Tensor:
    from hf_trajpe.data import pack_blocks

    blocks = [torch.tensor(pack_blocks(dd["train"], tokenizer, block_size)["input_ids"]) for dd in data.values()]
    return torch.cat(blocks)


def train(model, blocks: torch.Tensor, steps: int, batch: int, lr: float, seed: int) -> list[float]:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.1, 1 - s / steps))
    model.train()
    losses = []
    for _ in range(steps):
        ids = blocks[torch.randint(0, len(blocks), (batch,), generator=gen)]
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encodings", nargs="+", default=list(ENCODINGS), choices=list(ENCODINGS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--train", type=int, default=300, help="train documents per content type")
    p.add_argument("--max-sequences", type=int, default=24, help="test blocks per type at 4x")
    p.add_argument("--runs", default="runs/sample_report")
    p.add_argument("--out", default="docs/sample_report")
    args = p.parse_args()

    import hf_trajpe
    from hf_trajpe.data import byte_tokenizer, load_datasets, save_all
    from hf_trajpe.evaluation import evaluate_models, write_report

    torch.set_num_threads(2)
    random.seed(0)
    runs = Path(args.runs)
    save_all(runs / "data", sizes={"train": args.train, "validation": 0, "test": 200}, seed=0, progress=False)
    data = load_datasets(runs / "data")
    tok = byte_tokenizer()
    blocks = train_blocks(data, tok, args.block_size)
    print(f"{len(blocks)} training blocks of {args.block_size} tokens")
    models: dict[str, list[str]] = {}
    for enc in args.encodings:
        for seed in args.seeds:
            model = tiny_gpt2(seed)
            if enc != "native":
                hf_trajpe.patch(model, enc, **ENCODINGS[enc])
            t0 = time.perf_counter()
            losses = train(model, blocks, args.steps, args.batch, args.lr, seed)
            folder = runs / f"{enc}_s{seed}"
            model.save_pretrained(folder)
            models.setdefault(enc, []).append(str(folder))
            print(f"{enc} seed {seed}: loss {losses[0]:.3f} -> {sum(losses[-20:]) / 20:.3f} "
                  f"in {time.perf_counter() - t0:.0f}s")
    result = evaluate_models(models, baseline="native", data_dir=runs / "data", block_size=args.block_size,
                             length_multipliers=(1, 2, 4), max_sequences=args.max_sequences, n_resamples=2000)
    result.meta["training"] = (f"GPT-2 2x64, 4 heads, from scratch, {args.steps} AdamW steps of "
                               f"{args.batch}x{args.block_size} byte tokens (lr {args.lr}), all seven types "
                               f"mixed ({args.train} train documents each); seeds {args.seeds}")
    paths = write_report(result, args.out)
    print("\n".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    main()
