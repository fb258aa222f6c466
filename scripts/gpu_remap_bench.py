"""The remaps on a GPU through their kernel list (``kernel="auto"``: FlexAttention per region on CUDA) against the
stock model's SDPA (flash), side by side in one run: prefill time, peak memory of the prefill and decoding time
per token, at 16k, 32k and 64k tokens, on a SmolLM2-shaped model (30 layers, 576 wide, 9 query and 3 key/value
heads, random weights) and the benchmark's Llama (4 layers, 512 wide); writes remap_gpu.json and remap_gpu.md.

    python scripts/gpu_remap_bench.py --out docs/results/bench/gpu

Each round measures stock and every method in turn (the order rotated per round); a ratio is the method's figure
over stock's of the same round, reported as the median and range over rounds. The first call of each method at
each length is a warm-up (FlexAttention compiles there, once per shape class); its time is recorded apart.
``--device cpu --tokens 256 --models llama --rounds 1`` runs the same code on the CPU (a smoke test: the CPU
kernels, no GPU figures).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from hf_trajpe.benchmarks.machine import machine_info
from hf_trajpe.benchmarks.setup import SIZES, build_model
from hf_trajpe.compat import cache_kwarg

#: the targets against stock (docs/benchmarks.md): prefill time, peak memory of the prefill, a decoding step
TARGETS = {"prefill": 1.5, "memory": 1.1, "decode": 1.3}
METHODS = ("self_extend", "rerope", "dca", "string")


def smollm2_shaped(device: str, dtype: torch.dtype) -> torch.nn.Module:
    """SmolLM2-135M's shape (trained length 8,192) with random weights."""
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                        rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                        pad_token_id=0, attention_dropout=0.0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=dtype).to(device).eval()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(model, ids: torch.Tensor, new: int, device: str) -> dict[str, float]:
    """One prefill (with an empty cache object, the last token's logits only) and ``new`` greedy decoding steps
    through the cache: seconds and the prefill's peak memory above what was allocated before it."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if device == "cuda" else 0
    with torch.no_grad():
        _sync(device)
        start = time.perf_counter()
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_kwarg(): cache})
        _sync(device)
        prefill = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() - before if device == "cuda" else 0
        token = out.logits[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(new):
            out = model(input_ids=token, use_cache=True, **{cache_kwarg(): cache})
            token = out.logits[:, -1:].argmax(-1)
        _sync(device)
        decode = (time.perf_counter() - start) / max(1, new)
    return {"prefill_s": prefill, "decode_s": decode, "peak_bytes": peak}


def bench(model_name: str, tokens: int, methods: list[str], rounds: int, new: int, device: str,
          dtype: torch.dtype, kernel: str) -> dict:
    from hf_trajpe import patch

    model = (smollm2_shaped(device, dtype) if model_name == "smollm2" else
             build_model("llama", SIZES["default"], device, dtype))
    torch.manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (1, tokens), device=device)
    labels = ["stock", *methods]
    figures: dict[str, list[dict]] = {label: [] for label in labels}
    warmup: dict[str, float] = {}
    kernels: dict[str, str | None] = {}

    def run(label: str) -> dict:
        if label == "stock":
            return measure(model, ids, new, device)
        with patch(model, label, kernel=kernel) as handle:
            out = measure(model, ids, new, device)
            kernels[label] = handle.kernel
        return out

    for label in labels:
        start = time.perf_counter()
        run(label)
        warmup[label] = time.perf_counter() - start
        print(f"  {model_name} {tokens}: warm-up {label} {warmup[label]:.1f} s", file=sys.stderr, flush=True)
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            figures[label].append(run(label))
    rows = {}
    for label in methods:
        ratio = {}
        for key, name in (("prefill_s", "prefill"), ("decode_s", "decode"), ("peak_bytes", "memory")):
            values = [m[key] / s[key] for m, s in zip(figures[label], figures["stock"], strict=True) if s[key]]
            ratio[name] = {"median": statistics.median(values), "low": min(values), "high": max(values)} if values \
                else None
        rows[label] = {"kernel": kernels.get(label), "ratios": ratio,
                       "median": {k: statistics.median(m[k] for m in figures[label]) for k in figures[label][0]},
                       "verdicts": {k: (None if v is None else "met" if v["median"] <= TARGETS[k] else "missed")
                                    for k, v in ratio.items()}}
    stock = {k: statistics.median(m[k] for m in figures["stock"]) for k in figures["stock"][0]}
    model = None  # (freed before the next model is built)
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"model": model_name, "tokens": tokens, "new_tokens": new, "rounds": rounds, "stock": stock,
            "methods": rows, "warmup_s": warmup}


def markdown(result: dict) -> str:
    lines = [f"# Remaps on {result['machine'].get('gpu', result['machine'].get('cpu'))}: kernel "
             f"`{result['kernel']}` against stock SDPA", "",
             f"{result['dtype']}, {result['rounds']} rounds, {result['new_tokens']} decoded tokens; ratio = method / "
             "stock of the same round, median [range]; targets: prefill <= 1.5, memory <= 1.1, decode <= 1.3.", "",
             "| model | tokens | method | kernel | prefill | peak memory | decode per token | stock prefill s | "
             "warm-up s |", "|---|---:|---|---|---:|---:|---:|---:|---:|"]

    def cell(r):
        return "n/a" if r is None else f"{r['median']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"

    for row in result["rows"]:
        for label, m in row["methods"].items():
            lines.append(f"| {row['model']} | {row['tokens']:,} | {label} | {m['kernel']} | "
                         f"{cell(m['ratios']['prefill'])} | {cell(m['ratios']['memory'])} | "
                         f"{cell(m['ratios']['decode'])} | {row['stock']['prefill_s']:.3f} | "
                         f"{row['warmup_s'][label]:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for remap_gpu.json and remap_gpu.md")
    p.add_argument("--tokens", type=int, nargs="+", default=[16384, 32768, 65536])
    p.add_argument("--models", nargs="+", default=["smollm2", "llama"], choices=("smollm2", "llama"))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--new", type=int, default=16, help="decoded tokens per measurement (default: 16)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--kernel", default="auto", help="the remaps' kernel option (default: auto)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --device cpu for a smoke test of the same code)", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    rows = []
    for model in args.models:
        for tokens in args.tokens:
            print(f"{model} at {tokens} tokens", file=sys.stderr, flush=True)
            rows.append(bench(model, tokens, args.methods, args.rounds, args.new, args.device, dtype, args.kernel))
    import transformers

    result = {"machine": machine_info(args.device, dtype), "torch": torch.__version__,
              "transformers": transformers.__version__, "dtype": args.dtype, "kernel": args.kernel,
              "rounds": args.rounds, "new_tokens": args.new, "targets": TARGETS, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "remap_gpu.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "remap_gpu.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
