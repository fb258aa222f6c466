"""How many fine-tuning steps bring a pretrained model back after its encoding is swapped, how much of the
swap's damage they recover per content type, and does it then extrapolate better? (docs/finetune.md,
"Recovery after a swap"). The recovery study (``configs/study/recovery.yaml``, ``suite: recovery``) with the
options of this script as its overrides; the same as ``hf-trajpe study --config configs/study/recovery.yaml``.

    python scripts/recovery_curve.py                       # SmolLM2-135M, five encodings, ~1 h on 2 CPU cores
    python scripts/recovery_curve.py --encodings alibi none --steps 16 --out outputs/recovery
    python scripts/recovery_curve.py --encodings native none alibi --layers top:2 top:8 all   # swap the top k layers

``--layers``: each swapped encoding is run once per layer selection (``top:k``: the last k of SmolLM2's 30
layers; ``all``: every layer, the run of the encoding alone); ``native`` runs once. A finished run is not
trained again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's hf_trajpe, whatever copy pip installed
STUDY = ROOT / "configs/study/recovery.yaml"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    from hf_trajpe.study.config import read_study_data

    encodings = list(read_study_data(STUDY)["encodings"])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=None, help="the experiment config every run fine-tunes with "
                   "(default: the study's, configs/experiments/smollm2_lora_native.yaml)")
    p.add_argument("--encodings", nargs="+", default=encodings, choices=encodings)
    p.add_argument("--layers", nargs="+", default=None, metavar="SELECTION",
                   help="swap only these layers, one run per selection and swapped encoding: top:k (the last k), "
                        "all (every layer: the run of the encoding alone), or any layer selection (docs/patching.md); "
                        "native runs once (default: all)")
    p.add_argument("--steps", type=_positive, default=None, help="train.max_steps (default: the config's)")
    p.add_argument("--runs", type=Path, default=None, help="the study's output_dir (default: runs/study/recovery)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: docs/results/recovery)")
    p.add_argument("--real-sequences", type=_positive, default=None,
                   help="real_text test blocks at 4x the training length (default: 16)")
    p.add_argument("--type-sequences", type=_positive, default=None,
                   help="test blocks per content type at 4x the training length (default: 2)")
    p.add_argument("--threads", type=_positive, default=None,
                   help="CPU threads of each run (accelerate's --num_cpu_threads_per_process; default: accelerate's "
                        "choice, all cores). 1 on a machine shared with other jobs: there, 2 threads that wait for "
                        "each other's core made a step 6 times slower (80 s against 12-13 s)")
    p.add_argument("--no-eval", action="store_true", help="the curves only: no recovered shares, no evaluation at "
                                                           "1x/2x/4x")
    p.add_argument("--no-extrapolation", action="store_true", help="no hf-trajpe eval at 1x/2x/4x (the recovered "
                                                                    "shares are still computed)")
    p.add_argument("--recovery-types", nargs="+", default=None, metavar="TYPE",
                   help="content types of the recovered shares (default: real_text and the seven types)")
    p.add_argument("--recovery-chunks", type=_positive, default=None,
                   help="test chunks of the training length per content type for the recovered shares (default: 8)")
    return p.parse_args(argv)


def overrides(args: argparse.Namespace) -> list[str]:
    """The study's ``key=value`` overrides for the script's options (JSON values: YAML reads them as they are)."""
    from hf_trajpe.study.config import read_study_data

    every = read_study_data(STUDY)["encodings"]
    out = [f"encodings={json.dumps({name: every[name] for name in args.encodings})}"]
    given = {"experiment": args.config, "layers": args.layers, "steps": args.steps, "output_dir": args.runs,
             "report_dir": args.out, "threads": args.threads, "eval.real_sequences": args.real_sequences,
             "eval.type_sequences": args.type_sequences, "eval.types": args.recovery_types,
             "eval.chunks": args.recovery_chunks}
    out += [f"{k}={json.dumps(str(v) if isinstance(v, Path) else v)}" for k, v in given.items() if v is not None]
    if args.no_eval:
        out.append("eval.recovery=false")
    if args.no_eval or args.no_extrapolation:
        out.append("eval.extrapolation=false")
    return out


def main(argv=None) -> int:
    import shlex

    from hf_trajpe.study import load_study_config, run_study

    args = parse_args(argv)
    items = overrides(args)
    cfg = load_study_config(STUDY, overrides=items)
    command = "hf-trajpe study --config configs/study/recovery.yaml " + " ".join(shlex.quote(o) for o in items)
    run_study(cfg, command=command)
    return 0


if __name__ == "__main__":
    from hf_trajpe.study.suites.recovery.train import RunFailed
    from hf_trajpe.training.config import ConfigError

    try:
        sys.exit(main())
    except (RunFailed, ConfigError, FileExistsError) as err:
        print(f"recovery_curve.py: error: {err}", file=sys.stderr)
        sys.exit(2)
