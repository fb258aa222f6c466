"""The curve of docs/results/extension/remap_smollm2/: perplexity against position at 32,768 tokens for every
method read there (the zero-shot reads and the fine-tuned models' reads merged; one document).

    python scripts/remap_smollm2_curve.py
"""

from __future__ import annotations

import json
from pathlib import Path

from hf_trajpe.evaluation.long_context_run import plot_ppl_by_window

HERE = Path(__file__).resolve().parents[1] / "docs" / "results" / "extension" / "remap_smollm2"
#: the 32k reads merged, in this order; methods that fail past the trained length are left out of the curve
READS = ("test_32k", "pose_32k", "nopose_32k")
LEFT_OUT = ("stock", "string")


def main() -> int:
    merged: dict | None = None
    for folder in READS:
        path = HERE / folder / "long_context.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        if merged is None:
            merged = {**data, "models": {}}
        merged["models"].update({n: m for n, m in data["models"].items() if n not in LEFT_OUT})
    if merged is None:
        raise SystemExit(f"no 32k read under {HERE}: run the commands of its README first")
    out = HERE / "ppl_by_window_32k.png"
    plot_ppl_by_window(merged, out, title="SmolLM2-135M, 32,768 tokens, one document, bf16 (stock, STRING left out)")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
