"""How many fine-tuning steps bring a pretrained model back after its encoding is swapped, how much of the
swap's damage they recover per content type, and does it then extrapolate better? (docs/finetune.md,
"Recovery after a swap").

    python scripts/recovery_curve.py                       # SmolLM2-135M, five encodings, ~1 h on 2 CPU cores
    python scripts/recovery_curve.py --encodings alibi none --steps 16 --out outputs/recovery
    python scripts/recovery_curve.py --encodings native none alibi --layers top:2 top:8 all   # swap the top k layers

``--layers``: each swapped encoding is run once per layer selection (``top:k``: the last k of SmolLM2's 30
layers; ``all``: every layer, the run of the encoding alone, so earlier whole-model runs are reused; any
selection of docs/patching.md, "Layer selections"); ``native`` runs once.

For each encoding (and layer selection), one run of the recipe through ``accelerate launch`` (the experiment
config ``configs/experiments/smollm2_lora_native.yaml`` with its encoding replaced): LoRA on real text of this
machine, the held-out validation files scored before the first step and every ``train.eval_every`` steps.
``native`` is the stock model fine-tuned the same way: its step 0 is the stock model's perplexity (the
line to recover to). Then, per content type (``real_text`` and the seven types), the share of the swap's
perplexity damage that fine-tuning recovered, ``(ppl_swapped - ppl_tuned) / (ppl_swapped - ppl_stock)``
(:mod:`hf_trajpe.evaluation.recovery`), each model scored in-process on the same test chunks of the training
length, with a 95% interval from resampling the chunks; and ``hf-trajpe eval`` scores the final models and the
stock model on the test files of ``real_text`` and on the seven content types at 1x, 2x and 4x the training
length (``--no-extrapolation`` skips it).

Writes ``<out>/recovery.md`` and ``recovery.json`` (the curves, the steps to reach the stock line, the
recovered shares), ``<out>/configs/`` (the config of each run), ``<out>/recovery_scores/`` (the per-chunk
scores, reused while the final models are older), ``<out>/eval_real_text/`` and ``<out>/eval_types/`` (the
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


def _selection(text: str) -> str:
    from hf_trajpe.patching import normalize_selection

    try:
        normalize_selection(text)
    except (TypeError, ValueError) as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=BASE, help="base experiment config (default: %(default)s)")
    p.add_argument("--encodings", nargs="+", default=list(ENCODINGS), choices=list(ENCODINGS))
    p.add_argument("--layers", nargs="+", type=_selection, default=["all"], metavar="SELECTION",
                   help="swap only these layers, one run per selection and swapped encoding: top:k (the last k), "
                        "all (every layer: the run of the encoding alone), or any layer selection (docs/patching.md); "
                        "native runs once (default: all)")
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
    p.add_argument("--no-eval", action="store_true", help="the curves only: no recovered shares, no evaluation at "
                                                           "1x/2x/4x")
    p.add_argument("--no-extrapolation", action="store_true", help="no hf-trajpe eval at 1x/2x/4x (the recovered "
                                                                    "shares are still computed)")
    p.add_argument("--recovery-types", nargs="+", default=None, metavar="TYPE",
                   help="content types of the recovered shares (default: real_text and the seven types)")
    p.add_argument("--recovery-chunks", type=_positive, default=8,
                   help="test chunks of the training length per content type for the recovered shares (default: "
                        "%(default)s)")
    return p.parse_args(argv)


def _env() -> dict:
    """This checkout first on the path of the processes started here (whatever copy pip installed)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def run_name(encoding: str, layers: str | None) -> str:
    """The run's name and folder: the encoding, then its layer selection (``none_top8``); ``all``: the encoding."""
    if layers in (None, "all"):
        return encoding
    return f"{encoding}_" + "".join(c if c.isalnum() else "_" if c == "," else "" for c in layers.replace("-", "to"))


def plan(encodings: list[str], selections: list[str]) -> list[tuple[str, str, str | None]]:
    """``(name, encoding, layers)`` of every run: ``native`` once, each other encoding once per selection."""
    runs = []
    for encoding in encodings:
        for layers in ([None] if encoding == "native" else selections):
            layers = None if layers == "all" else layers
            runs.append((run_name(encoding, layers), encoding, layers))
    return list(dict.fromkeys(runs))


def patch_of(encoding: str, layers: str | None) -> dict:
    """The experiment config's ``encoding`` section of a run."""
    section = json.loads(json.dumps(ENCODINGS[encoding]))
    if layers is not None:
        section.setdefault("options", {})["layers"] = layers
    return section


def run_config(base: dict, name: str, encoding: str, layers: str | None, runs: Path, steps: int | None) -> dict:
    cfg = json.loads(json.dumps(base))
    cfg["name"] = f"smollm2_recovery_{name}"
    cfg["output_dir"] = str(runs / name)
    cfg["encoding"] = patch_of(encoding, layers)
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


def _chunk_scores(model, blocks: dict, tokenizer) -> dict:
    from hf_trajpe.evaluation.scoring import score_blocks

    out = {}
    for t, b in blocks.items():
        scores = score_blocks(model, b, "clm", batch_size=2, tokenizer=tokenizer)
        out[t] = {"nll": scores.nll.tolist(), "count": scores.count.tolist()}
    return out


def _cached(path: Path, newer_than: list[Path], key: dict, compute) -> dict:
    """``compute()``, or what ``path`` holds when it was written for ``key`` after every file of ``newer_than``."""
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("key") == key and all(path.stat().st_mtime > f.stat().st_mtime for f in newer_than):
            return data["scores"]
    scores = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "scores": scores}) + "\n")
    return scores


def recovery(cfg: dict, runs_dir: Path, runs: list[tuple[str, str, str | None]], out: Path, types: list[str],
             chunks: int) -> dict:
    """``{run: {type: recovery_fraction(...)}}`` for every swapped run: the stock model, the stock model swapped
    (before tuning) and the run's final model scored on the same ``chunks`` test blocks of the training length."""
    import hf_trajpe
    from hf_trajpe.data import load_tokenizer
    from hf_trajpe.evaluation.evaluate_models import content_streams
    from hf_trajpe.evaluation.recovery import recovery_fraction
    from hf_trajpe.loading import load_model, resolve_source

    swapped_runs = [r for r in runs if r[1] != "native"]
    if not swapped_runs:
        return {}
    source = resolve_source(cfg["model"]["path"], "model.path")
    tokenizer = load_tokenizer(str(resolve_source(cfg["model"]["tokenizer"], "model.tokenizer")))
    block = int(cfg["data"]["block_size"])
    streams = content_streams(types, tokenizer, "clm", n_test=int(cfg["data"]["test"]))
    short = [t for t, s in streams.items() if len(s) < block]
    if short:
        raise RunFailed(f"the test data of {short} is shorter than one chunk of {block} tokens")
    blocks = {t: torch_blocks(s, block, chunks) for t, s in streams.items()}
    key = {"types": types, "chunks": {t: int(b.shape[0]) for t, b in blocks.items()}, "block": block,
           "source": str(source), "test": int(cfg["data"]["test"])}
    print(f"[recovery] scoring {', '.join(f'{t} ({b.shape[0]})' for t, b in blocks.items())} chunks of {block} "
          "tokens", flush=True)
    stock = load_model(source).eval()
    scores = {"stock": _cached(out / "recovery_scores" / "stock.json", [], key,
                               lambda: _chunk_scores(stock, blocks, tokenizer))}
    reference = None  # the stock model tuned the same way, where the native run is part of the study
    native_final = runs_dir / "native" / "final"
    if any(r[1] == "native" for r in runs) and (native_final / "config.json").exists():
        print("[recovery] native: the stock model tuned", flush=True)
        reference = _cached(out / "recovery_scores" / "native_tuned.json", [native_final / "config.json"], key,
                            lambda: _chunk_scores(hf_trajpe.from_pretrained(str(native_final)).eval(), blocks,
                                                  tokenizer))
    result = {}
    for name, encoding, layers in swapped_runs:
        final = runs_dir / name / "final"
        patch = patch_of(encoding, layers)

        def swapped_scores(patch=patch):
            with hf_trajpe.patch(stock, patch["name"], **patch.get("options", {})):
                return _chunk_scores(stock, blocks, tokenizer)

        def tuned_scores(final=final):
            return _chunk_scores(hf_trajpe.from_pretrained(str(final)).eval(), blocks, tokenizer)

        print(f"[recovery] {name}: the swapped and the tuned model", flush=True)
        swapped = _cached(out / "recovery_scores" / f"{name}_swapped.json", [], dict(key, patch=patch), swapped_scores)
        tuned = _cached(out / "recovery_scores" / f"{name}_tuned.json", [final / "config.json"], key, tuned_scores)
        models = (scores["stock"], swapped, tuned) + ((reference,) if reference is not None else ())
        result[name] = {t: recovery_fraction(*((m[t]["nll"], m[t]["count"]) for m in models)) for t in types}
    return result


def torch_blocks(stream: list[int], block: int, chunks: int):
    """The first ``chunks`` blocks of ``block`` tokens of a test stream (fewer where the stream is shorter)."""
    import torch

    n = min(len(stream) // block, chunks)
    return torch.tensor(stream[: n * block], dtype=torch.long).view(n, block)


def _share(r: dict) -> str:
    if r["recovered"] is None:
        return r.get("status", "no damage")
    ci = f" [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]" if r["ci"] is not None else ""
    return f"{r['recovered']:.2f}{ci}"


def _percent(r: dict, key: str) -> str:
    lo, hi = r[f"{key}_ci"]
    return f"{100 * r[key]:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def recovery_lines(shares: dict, runs: list[tuple[str, str, str | None]], chunks: int, block: int) -> list[str]:
    """Per swapped encoding, a table: one row per layer selection, one column per content type."""
    if not shares:
        return []
    types = list(next(iter(shares.values())))
    lines = ["## Recovered share of the swap's damage, per content type", "",
             "`(ppl_swapped - ppl_tuned) / (ppl_swapped - ppl_stock)`: 1 = back to the stock model, 0 = no better "
             "than the untuned swap (above 1: better than the stock model, which tuning on this text makes any model; "
             f"below 0: worse than the untuned swap). Each model scored on the same test chunks ({chunks} of {block} "
             "tokens per type at most); 95% interval from resampling the chunks (paired). Perplexities in "
             "`recovery.json`.", ""]
    tables = [("recovered share", _share), ("damage of the swap, `ppl_swapped / ppl_stock - 1`",
                                             lambda r: _percent(r, "damage"))]
    if "gap" in next(iter(next(iter(shares.values())).values())):
        tables.append(("gap after tuning to the stock model tuned the same way (`native`), `ppl_tuned / "
                       "ppl_native_tuned - 1`", lambda r: _percent(r, "gap")))
    lines[-1:-1] = ["", "A share is given only where the damage is resolved (its interval above 0; else \"damage not "
                    "resolved\": a ratio over a damage that may be 0 has no interval). The gap, where the native run "
                    "is part of the study, compares the tuned swap with the stock model tuned the same way: it stays "
                    "meaningful where the swap barely hurt."]
    for encoding in dict.fromkeys(e for _, e, _ in runs if e != "native"):
        rows = [(n, layers) for n, e, layers in runs if e == encoding and n in shares]
        for title, cell in tables:
            lines += [f"**{encoding}**: {title}", "", "| layers swapped | " + " | ".join(types) + " |",
                      "|---|" + "---:|" * len(types)]
            for name, layers in rows:
                lines.append(f"| {layers or 'all'} | " + " | ".join(cell(shares[name][t]) for t in types) + " |")
            lines.append("")
    return lines


def steps_to_stock(points: list[dict], stock: float) -> int | None:
    return next((p["step"] for p in points if p["perplexity"] <= stock), None)


def write_report(out: Path, curves: dict, stock: float | None, seconds: dict, cfg: dict, evaluated: bool,
                 threads: int | None, shares: dict | None = None, runs: list | None = None, chunks: int = 0) -> None:
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
    lines += recovery_lines(shares or {}, runs or [], chunks, int(cfg["data"]["block_size"]))
    if evaluated or (out / "eval_real_text" / "report.md").is_file():
        lines += ["The final models against the stock model at 1x, 2x and 4x the training length: on the held-out "
                  "real_text files, [eval_real_text/report.md](eval_real_text/report.md); per content type, "
                  "[eval_types/report.md](eval_types/report.md).", ""]
    (out / "recovery.md").write_text("\n".join(lines))
    (out / "recovery.json").write_text(json.dumps({"curves": curves, "stock_perplexity": stock, "seconds": seconds,
                                                   "recovered": shares or {}, "config": cfg}, indent=2) + "\n")


def main(argv=None) -> int:
    from hf_trajpe.training.yaml_files import read_config_file

    args = parse_args(argv)
    base = read_config_file(args.config)  # a config's base: file resolved (hf_trajpe.training.yaml_files)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads is not None:  # the in-process scoring of the recovered shares too
        import torch

        torch.set_num_threads(args.threads)
    runs = plan(args.encodings, args.layers)
    curves, seconds = {}, {}
    cfg = base
    for name, encoding, layers in runs:
        cfg = run_config(base, name, encoding, layers, args.runs, args.steps)
        seconds[name] = train(name, cfg, args.out, args.threads)
        curves[name] = curve(Path(cfg["output_dir"]))
    stock = curves["native"][0]["perplexity"] if "native" in curves and curves["native"][0]["step"] == 0 else None
    shares, names_run = {}, [name for name, _, _ in runs]
    if not args.no_eval:
        from hf_trajpe.data.registry import names

        types = args.recovery_types or ["real_text", *names()]
        shares = recovery(cfg, args.runs, runs, args.out, types, args.recovery_chunks)
        if not args.no_extrapolation:
            evaluate(cfg, args.runs, names_run, args.out, ["real_text"], args.real_sequences, "eval_real_text")
            evaluate(cfg, args.runs, names_run, args.out, names(), args.type_sequences, "eval_types")
    write_report(args.out, curves, stock, seconds, cfg, not (args.no_eval or args.no_extrapolation), args.threads,
                 shares, runs, args.recovery_chunks)
    print((args.out / "recovery.md").read_text())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RunFailed as err:
        print(f"recovery_curve.py: error: {err}", file=sys.stderr)
        sys.exit(2)
