"""How many fine-tuning steps bring a pretrained model back after its encoding is swapped, and does it then
extrapolate better? (docs/finetune.md, "Real models").

    python scripts/recovery_curve.py                       # SmolLM2-135M, five encodings, ~1 h on 2 CPU cores
    python scripts/recovery_curve.py --encodings alibi none --steps 16 --out outputs/recovery

For each encoding, one run of the recipe through ``accelerate launch`` (the experiment config
``configs/experiments/smollm2_lora_native.yaml`` with its encoding replaced): LoRA on real text of this
machine, the held-out validation files scored before the first step and every ``train.eval_every`` steps.
``native`` is the stock model fine-tuned the same way: its step 0 is the stock model's perplexity (the
line to recover to). Then ``hf-trajpe eval`` scores the final models and the stock model on the test
files of ``real_text`` and on the seven content types at 1x, 2x and 4x the training length.

Writes ``<out>/recovery.md`` and ``recovery.json`` (the curves, the steps to reach the stock line),
``<out>/configs/`` (the config of each run), ``<out>/eval_real_text/`` and ``<out>/eval_types/`` (the
evaluation reports).
A run whose ``final/`` model exists is not trained again (delete its folder to redo it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's hf_trajpe, whatever copy pip installed
BASE = ROOT / "configs/experiments/smollm2_lora_native.yaml"
ACCELERATE = ROOT / "configs/accelerate/cpu.yaml"
ENCODINGS = {
    "native": {"name": "native"},
    "trajectory": {"name": "trajectory", "options": {"strength": 0.2, "learnable_strength": True}},
    "alibi": {"name": "alibi"},
    "none": {"name": "none"},
    "cope": {"name": "cope", "options": {"npos_max": 256}},
}


class RunFailed(RuntimeError):
    """A recipe or evaluation process ended with an error (its own message is above in the output)."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _run(cmd: list[str], what: str) -> None:
    try:
        subprocess.run(cmd, check=True, cwd=ROOT, env=_env())
    except subprocess.CalledProcessError as err:
        raise RunFailed(f"{what} failed with exit status {err.returncode} (its message is above); fix that and run "
                        "this command again: finished runs are kept and an interrupted one resumes") from None


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=BASE, help="base experiment config (default: %(default)s)")
    p.add_argument("--encodings", nargs="+", default=list(ENCODINGS), choices=list(ENCODINGS))
    p.add_argument("--steps", type=_positive, default=None, help="train.max_steps (default: the config's)")
    p.add_argument("--runs", type=Path, default=ROOT / "runs/recovery", help="run folders (default: %(default)s)")
    p.add_argument("--out", type=Path, default=ROOT / "docs/results/recovery", help="report folder")
    p.add_argument("--real-sequences", type=_positive, default=16,
                   help="real_text test blocks at 4x the training length (default: %(default)s)")
    p.add_argument("--type-sequences", type=_positive, default=2,
                   help="test blocks per content type at 4x the training length (default: %(default)s)")
    p.add_argument("--threads", type=_positive, default=None,
                   help="CPU threads of each run (accelerate's --num_cpu_threads_per_process; default: accelerate's "
                        "choice, all cores). 1 on a machine shared with other jobs: there, 2 threads that wait for "
                        "each other's core made a step 6 times slower (80 s against 12-13 s)")
    p.add_argument("--no-eval", action="store_true", help="the curves only, no evaluation at 1x/2x/4x")
    return p.parse_args(argv)


def _env() -> dict:
    """This checkout first on the path of the processes started here (whatever copy pip installed)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def run_config(base: dict, encoding: str, runs: Path, steps: int | None) -> dict:
    cfg = json.loads(json.dumps(base))
    cfg["name"] = f"smollm2_recovery_{encoding}"
    cfg["output_dir"] = str(runs / encoding)
    cfg["encoding"] = ENCODINGS[encoding]
    if steps is not None:
        cfg["train"]["max_steps"] = steps
    return cfg


def train(encoding: str, cfg: dict, out: Path, threads: int | None) -> float:
    """One recipe run; returns its wall seconds (0 when its final model was there already)."""
    final = Path(cfg["output_dir"]) / "final"
    path = out / "configs" / f"{encoding}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    seconds_file = Path(cfg["output_dir"]) / "recovery_seconds.txt"
    if (final / "config.json").is_file():
        print(f"[recovery] {encoding}: {final} exists, not trained again", flush=True)
        return float(seconds_file.read_text()) if seconds_file.is_file() else float("nan")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE)]
    if threads is not None:
        cmd += ["--num_cpu_threads_per_process", str(threads)]
    cmd += [str(ROOT / "recipes/finetune.py"), "--config", str(path), "logging.progress=false"]
    if Path(cfg["output_dir"]).exists():
        cmd.append("--resume")
    print(f"[recovery] {encoding}: {' '.join(cmd[2:])}", flush=True)
    start = time.perf_counter()
    _run(cmd, f"the {encoding} run")
    seconds = time.perf_counter() - start
    seconds_file.write_text(f"{seconds:.1f}\n")
    return seconds


def seconds_per_step(run_dir: Path, tokens_per_step: int) -> float:
    """Median training seconds per step of the logged windows (evaluation and saving excluded)."""
    from hf_trajpe.training.tracking import read_metrics

    rates = sorted(r["train/tokens_per_second"] for r in read_metrics(run_dir) if r.get("train/tokens_per_second"))
    return tokens_per_step / rates[len(rates) // 2] if rates else float("nan")


def curve(run_dir: Path) -> list[dict]:
    history = json.loads((run_dir / "eval.json").read_text())
    return [{"step": e["step"], "perplexity": e["real_text"]["perplexity"], "loss": e["real_text"]["loss"]}
            for e in sorted(history, key=lambda e: e["step"])]


def evaluate(cfg: dict, runs: Path, encodings: list[str], out: Path, types: list[str], max_sequences: int,
             name: str) -> None:
    """``hf-trajpe eval``: the stock model (the baseline) and each final model on ``types`` at 1x, 2x, 4x."""
    from hf_trajpe.loading import resolve_source

    report = out / name / "report.json"
    finals = [runs / e / "final" / "config.json" for e in encodings]
    if report.is_file() and all(report.stat().st_mtime > f.stat().st_mtime for f in finals):
        print(f"[recovery] {report} is newer than every final model: not evaluated again", flush=True)
        return
    source = str(resolve_source(cfg["model"]["path"], "model.path"))
    cmd = [sys.executable, "-m", "hf_trajpe", "eval", "--model", f"stock={source}"]
    cmd += [a for e in encodings for a in ("--model", f"{e}={runs / e / 'final'}")]
    cmd += ["--baseline", "stock", "--types", *types, "--block-size", str(cfg["data"]["block_size"]),
            "--lengths", "1", "2", "4", "--tokenizer", source, "--max-sequences", str(max_sequences),
            "--n-test", str(cfg["data"]["test"]), "--batch-size", "2", "--out", str(out / name), "--no-progress"]
    print(f"[recovery] evaluation: {' '.join(cmd[2:])}", flush=True)
    _run(cmd, f"the evaluation {name}")


def steps_to_stock(points: list[dict], stock: float) -> int | None:
    return next((p["step"] for p in points if p["perplexity"] <= stock), None)


def write_report(out: Path, curves: dict, stock: float | None, seconds: dict, cfg: dict, evaluated: bool,
                 threads: int | None) -> None:
    steps = sorted({p["step"] for c in curves.values() for p in c})
    model = Path(str(cfg["model"]["path"]).split(":", 1)[-1]).name
    lines = [f"# Recovery after swapping the encoding of `{model}`", "",
             f"Command: `python scripts/recovery_curve.py {' '.join(sys.argv[1:])}`".rstrip() + ".", "",
             f"LoRA r {cfg['model']['lora']['r']} on every projection, {cfg['train']['batch_size']} x "
             f"{cfg['data']['block_size']} tokens a step, lr {cfg['optimizer']['lr']} ({cfg['schedule']['name']}), "
             f"real_text validation files ({cfg['data']['eval_blocks']} blocks) scored every "
             f"{cfg['train']['eval_every']} steps; one seed.", ""]
    if stock is not None:
        lines += [f"Stock model (no swap, no training): perplexity **{stock:.2f}**.", ""]
    lines += ["| step | " + " | ".join(curves) + " |", "|---:|" + "---:|" * len(curves)]
    for s in steps:
        row = [next((f"{p['perplexity']:.2f}" for p in c if p["step"] == s), "") for c in curves.values()]
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    if stock is not None:
        reach = {e: steps_to_stock(c, stock) for e, c in curves.items()}
        lines += ["", "Steps to the stock perplexity: " + "; ".join(
            f"{e} {'step ' + str(r) if r is not None else 'not within ' + str(steps[-1])}" for e, r in reach.items())
            + "."]
    tokens = cfg["train"]["batch_size"] * cfg["data"]["block_size"]
    per_step = {e: seconds_per_step(Path(cfg["output_dir"]).parent / e, tokens) for e in curves}
    steps_text = ", ".join(f"{e} {s:.1f}" for e, s in per_step.items())
    wall_text = ", ".join(f"{e} {s:.0f}" for e, s in seconds.items())
    lines += ["", f"Training seconds per step (median of the logged windows; {threads or 'all'} thread(s) per run, "
              f"{os.cpu_count()} CPU cores): {steps_text}. Wall time per run (s; loading, evaluations and saving "
              f"included): {wall_text}.", ""]
    if evaluated or (out / "eval_real_text" / "report.md").is_file():
        lines += ["The final models against the stock model at 1x, 2x and 4x the training length: on the held-out "
                  "real_text files, [eval_real_text/report.md](eval_real_text/report.md); per content type, "
                  "[eval_types/report.md](eval_types/report.md).", ""]
    (out / "recovery.md").write_text("\n".join(lines))
    (out / "recovery.json").write_text(json.dumps({"curves": curves, "stock_perplexity": stock, "seconds": seconds,
                                                   "config": cfg}, indent=2) + "\n")


def main(argv=None) -> int:
    from hf_trajpe.training.yaml_files import read_config_file

    args = parse_args(argv)
    base = read_config_file(args.config)  # a config's base: file resolved (hf_trajpe.training.yaml_files)
    args.out.mkdir(parents=True, exist_ok=True)
    curves, seconds = {}, {}
    cfg = base
    for encoding in args.encodings:
        cfg = run_config(base, encoding, args.runs, args.steps)
        seconds[encoding] = train(encoding, cfg, args.out, args.threads)
        curves[encoding] = curve(Path(cfg["output_dir"]))
    stock = curves["native"][0]["perplexity"] if "native" in curves and curves["native"][0]["step"] == 0 else None
    if not args.no_eval:
        from hf_trajpe.data.registry import names

        evaluate(cfg, args.runs, args.encodings, args.out, ["real_text"], args.real_sequences, "eval_real_text")
        evaluate(cfg, args.runs, args.encodings, args.out, names(), args.type_sequences, "eval_types")
    write_report(args.out, curves, stock, seconds, cfg, not args.no_eval, args.threads)
    print((args.out / "recovery.md").read_text())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RunFailed as err:
        print(f"recovery_curve.py: error: {err}", file=sys.stderr)
        sys.exit(2)
