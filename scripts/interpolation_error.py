"""Max error of the seed design's table interpolation (linear, cubic) and of float32 ``exact``
against a float64 evaluation of the sinusoidal formula, positions 0..8191, d=512 (docs/spec.md, section 2.7).

    python3 scripts/interpolation_error.py [--steps-per-position 16] [--dim 512]

Prints a Markdown table (docs/encodings.md, "Interpolation error", holds its output).
"""

from __future__ import annotations

import argparse

import torch

from hf_trajpe import SinusoidalTable, sinusoidal_encoding


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-positions", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--steps-per-position", type=int, default=16,
                    help="fractional points evaluated between consecutive integers")
    args = ap.parse_args()
    table = SinusoidalTable(args.max_positions, args.dim)
    grid = torch.arange(0, (args.max_positions - 1) * args.steps_per_position + 1, dtype=torch.float64)
    grid = grid / args.steps_per_position
    worst = {m: 0.0 for m in ("linear", "cubic", "exact")}
    mean = {m: 0.0 for m in worst}
    # per frequency band: the first pair (w=1 rad/position) dominates the interpolation error
    band = {m: torch.zeros(args.dim // 2, dtype=torch.float64) for m in worst}
    for chunk in grid.split(8192):
        ref = sinusoidal_encoding(chunk, args.dim)  # float64 reference
        for m in worst:
            # positions as a user passes them: float32 adapted positions
            err = (table(chunk.float(), m).double() - ref).abs()
            worst[m] = max(worst[m], err.max().item())
            mean[m] += err.mean().item() * len(chunk) / len(grid)
            band[m] = torch.maximum(band[m], err.view(len(chunk), -1, 2).amax(dim=(0, 2)))
    print(f"positions 0..{args.max_positions - 1}, {args.steps_per_position} points per unit "
          f"({len(grid)} positions), d={args.dim}, table float32, reference float64\n")
    print("| mode | max abs error | mean abs error | max error, pairs k >= 64 (w <= 0.0176) |")
    print("|---|---:|---:|---:|")
    for m in worst:
        print(f"| {m} | {worst[m]:.3g} | {mean[m]:.3g} | {band[m][64:].max().item():.3g} |")


if __name__ == "__main__":
    main()
