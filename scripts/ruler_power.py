"""Prompts per cell for a paired comparison of two methods on the same RULER prompts: McNemar's test of a
difference in found-rates (Connor 1987's sample size for paired proportions), at a level corrected for the number
of declared comparisons (Holm's first, strictest, step), for a power and a share of discordant prompts.

    python scripts/ruler_power.py --difference 0.2 --power 0.8 --comparisons 12 --discordant 0.3

The share of discordant prompts (one method finds the needle, the other does not) is what a pilot or an earlier
table gives: it is at least the difference itself, and more where the two methods fail on different prompts.
"""

from __future__ import annotations

import argparse
import math
import sys
from statistics import NormalDist


def prompts_needed(difference: float, power: float, alpha: float, discordant: float) -> int:
    """Connor's n for McNemar's test (two-sided ``alpha``): the prompts that give ``power`` to detect a difference
    ``difference`` in found-rates when a share ``discordant`` of the prompts is discordant."""
    if not 0 < difference <= discordant <= 1:
        raise ValueError(f"need 0 < difference <= discordant <= 1, got difference={difference}, "
                         f"discordant={discordant}")
    z_alpha = NormalDist().inv_cdf(1 - alpha / 2)
    z_beta = NormalDist().inv_cdf(power)
    n = (z_alpha * math.sqrt(discordant) + z_beta * math.sqrt(discordant - difference ** 2)) ** 2 / difference ** 2
    return math.ceil(n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--difference", type=float, default=0.2, help="difference in found-rates to detect (0.2)")
    p.add_argument("--power", type=float, default=0.8)
    p.add_argument("--alpha", type=float, default=0.05, help="family-wise level (0.05)")
    p.add_argument("--comparisons", type=int, default=1, help="declared comparisons, Holm-corrected (1)")
    p.add_argument("--discordant", type=float, nargs="+", default=[0.2, 0.3, 0.4])
    args = p.parse_args(argv)
    level = args.alpha / args.comparisons
    print(f"difference {args.difference}, power {args.power}, level {args.alpha} / {args.comparisons} = {level:.4g}")
    for share in args.discordant:
        n = prompts_needed(args.difference, args.power, level, share)
        print(f"  discordant share {share:.2f}: {n} prompts per cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
