"""The recovery study's evaluation: per content type, the share of the swap's perplexity damage that fine-tuning
recovered, ``(ppl_swapped - ppl_tuned) / (ppl_swapped - ppl_stock)`` (:mod:`hf_trajpe.evaluation.recovery`),
each model scored in-process on the same test chunks of the training length (per-chunk scores cached in
``report_dir/recovery_scores/``, reused while the final models are older); and ``hf-trajpe eval`` of the final
models and the stock model at 1x, 2x and 4x the training length (``report_dir/eval_real_text/``,
``eval_types/``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .train import RunFailed, run_process

__all__ = ["extrapolation", "recovery_shares", "seconds_per_step", "first_chunks"]


def _log(message: str) -> None:
    print(f"[recovery] {message}", file=sys.stderr, flush=True)


def seconds_per_step(run_dir: Path, tokens_per_step: int) -> float:
    """Median training seconds per step of the logged windows (evaluation and saving excluded)."""
    from ....training.tracking import read_metrics

    rates = sorted(r["train/tokens_per_second"] for r in read_metrics(run_dir) if r.get("train/tokens_per_second"))
    return tokens_per_step / rates[len(rates) // 2] if rates else float("nan")


def extrapolation(exp: dict, finals: dict[str, Path], out: Path, types: list[str], max_sequences: int,
                  name: str) -> None:
    """``hf-trajpe eval``: the stock model (the baseline) and each final model (``finals``: name -> folder) on
    ``types`` at 1x, 2x, 4x, into ``out/name``; skipped while its report is newer than every final model."""
    from ....loading import resolve_source

    report = out / name / "report.json"
    configs = [f / "config.json" for f in finals.values()]
    if report.is_file() and all(report.stat().st_mtime > f.stat().st_mtime for f in configs):
        _log(f"{report} is newer than every final model: not evaluated again")
        return
    source = str(resolve_source(exp["model"]["path"], "model.path"))
    cmd = [sys.executable, "-m", "hf_trajpe", "eval", "--model", f"stock={source}"]
    cmd += [a for e, f in finals.items() for a in ("--model", f"{e}={f}")]
    cmd += ["--baseline", "stock", "--types", *types, "--block-size", str(exp["data"]["block_size"]),
            "--lengths", "1", "2", "4", "--tokenizer", source, "--max-sequences", str(max_sequences),
            "--n-test", str(exp["data"]["test"]), "--batch-size", "2", "--out", str(out / name), "--no-progress"]
    _log(f"evaluation: {' '.join(cmd[2:])}")
    run_process(cmd, f"the evaluation {name}")


def _chunk_scores(model, blocks: dict, tokenizer) -> dict:
    from ....evaluation.scoring import score_blocks

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


def first_chunks(stream: list[int], block: int, chunks: int):
    """The first ``chunks`` blocks of ``block`` tokens of a test stream (fewer where the stream is shorter)."""
    import torch

    n = min(len(stream) // block, chunks)
    return torch.tensor(stream[: n * block], dtype=torch.long).view(n, block)


def recovery_shares(exp: dict, swapped: dict[str, tuple[dict, list[Path]]], native: list[Path] | None, out: Path,
                    types: list[str], chunks: int, seeds: list[int] | None = None) -> dict:
    """``{run: {type: recovery_over_seeds(...)}}`` for every swapped run (``swapped``: name -> (its patch options,
    its final model per seed)): the stock model, the stock model swapped (before tuning) and each seed's final
    model scored on the same ``chunks`` test blocks of the training length; ``native``: the stock model tuned the
    same way (its final model per seed, paired with the swapped runs by seed), the reference of the gap after
    tuning. ``seeds``: the training seeds, in the order of the final models (one seed: the files of a one-seed
    study, ``<run>_tuned.json``; several: ``<run>_s<seed>_tuned.json``)."""
    from ....data import load_tokenizer
    from ....evaluation.evaluate_models import content_streams
    from ....evaluation.recovery import recovery_over_seeds
    from ....loading import load_model, resolve_source
    from ....patching import from_pretrained
    from ....patching import patch as patch_model

    if not swapped:
        return {}
    seeds = list(seeds or [0])
    source = resolve_source(exp["model"]["path"], "model.path")
    tokenizer = load_tokenizer(str(resolve_source(exp["model"]["tokenizer"], "model.tokenizer")))
    block = int(exp["data"]["block_size"])
    streams = content_streams(types, tokenizer, "clm", n_test=int(exp["data"]["test"]))
    short = [t for t, s in streams.items() if len(s) < block]
    if short:
        raise RunFailed(f"the test data of {short} is shorter than one chunk of {block} tokens")
    blocks = {t: first_chunks(s, block, chunks) for t, s in streams.items()}
    key = {"types": types, "chunks": {t: int(b.shape[0]) for t, b in blocks.items()}, "block": block,
           "source": str(source), "test": int(exp["data"]["test"])}
    scores_dir = out / "recovery_scores"

    def seed_file(name: str, seed: int) -> Path:
        return scores_dir / (f"{name}_tuned.json" if len(seeds) == 1 else f"{name}_s{seed}_tuned.json")

    def tuned(name: str, final: Path, seed: int) -> dict:
        return _cached(seed_file(name, seed), [final / "config.json"], key,
                       lambda: _chunk_scores(from_pretrained(str(final)).eval(), blocks, tokenizer))

    _log(f"scoring {', '.join(f'{t} ({b.shape[0]})' for t, b in blocks.items())} chunks of {block} tokens")
    stock = load_model(source).eval()
    stock_scores = _cached(scores_dir / "stock.json", [], key, lambda: _chunk_scores(stock, blocks, tokenizer))
    reference = None  # the stock model tuned the same way, per seed, where the native run is part of the study
    if native and all((f / "config.json").exists() for f in native):
        _log("native: the stock model tuned")
        reference = [tuned("native", f, s) for f, s in zip(native, seeds, strict=True)]
    result = {}
    for name, (options, finals) in swapped.items():
        def swapped_scores(options=options):
            opts = dict(options)
            with patch_model(stock, opts.pop("encoding"), **opts):
                return _chunk_scores(stock, blocks, tokenizer)

        _log(f"{name}: the swapped and the tuned model")
        patch = {"name": options["encoding"], **({"options": {k: v for k, v in options.items() if k != "encoding"}}
                                                 if len(options) > 1 else {})}
        swapped_run = _cached(scores_dir / f"{name}_swapped.json", [], dict(key, patch=patch), swapped_scores)
        runs = [tuned(name, f, s) for f, s in zip(finals, seeds, strict=True)]

        def pair(m: dict, t: str) -> tuple:
            return m[t]["nll"], m[t]["count"]

        result[name] = {t: recovery_over_seeds(pair(stock_scores, t), pair(swapped_run, t), [pair(r, t) for r in runs],
                                               None if reference is None else [pair(r, t) for r in reference])
                        for t in types}
    return result
