"""The content study's evaluation besides perplexity (:func:`hf_trajpe.evaluation.evaluate_models`): where the
trajectory models put their tokens per content type, and the random-content control of every model."""

from __future__ import annotations

from pathlib import Path

import torch

from .config import StudyConfig

__all__ = ["control_all", "positions_all"]


def positions_all(cfg: StudyConfig, models: dict[str, list[str]], data_dir: Path,
                  content_types: list[str]) -> dict[str, dict[str, dict]]:
    """Displacement statistics (:mod:`hf_trajpe.evaluation.positions`) of every trajectory model per content
    type, on the test tokens at the training length (the evaluation's blocks at 1x), mean over seeds."""
    from ....data import load_tokenizer
    from ....evaluation import content_streams, load_model
    from ....evaluation.positions import is_trajectory, mean_statistics, position_statistics

    tok = load_tokenizer(cfg.tokenizer)
    streams = content_streams(content_types, tok, "clm", data_dir=data_dir)
    L, longest = cfg.data.block_size, cfg.data.block_size * max(cfg.eval.length_multipliers)
    blocks = {t: torch.tensor(s[: min(len(s) // longest, cfg.eval.max_sequences) * longest]).view(-1, L)
              for t, s in streams.items()}
    out: dict[str, dict[str, dict]] = {}
    for name, folders in models.items():
        if name in cfg.encodings and cfg.encodings[name].get("encoding") != "trajectory":
            continue  # no need to load it to know (sweep models are trajectory)
        per_seed: dict[str, list[dict]] = {}
        for folder in folders:
            model = load_model(folder)
            if not is_trajectory(model):
                break
            for t, b in blocks.items():
                per_seed.setdefault(t, []).append(position_statistics(model, b, cfg.eval.batch_size, tok))
        if per_seed:
            out[name] = {t: mean_statistics(v) for t, v in per_seed.items()}
    return out


def control_all(cfg: StudyConfig, models: dict[str, list[str]], data_dir: Path) -> dict[str, dict]:
    """:func:`~.control.random_control` of every model, averaged over seeds (the diagnosis of the control)."""
    from ....data import load_tokenizer
    from ....data.random_content import ALPHABET
    from ....evaluation import content_streams, load_model
    from .control import random_control

    tok = load_tokenizer(cfg.tokenizer)
    stream = content_streams(["random_content"], tok, "clm", data_dir=data_dir)["random_content"]
    alphabet = tok(ALPHABET, add_special_tokens=False)["input_ids"]
    out = {}
    for name, folders in models.items():
        per_seed = [random_control(load_model(f), stream, alphabet, cfg.data.block_size,
                                   batch_size=cfg.eval.batch_size) for f in folders]
        out[name] = {k: (v if isinstance(v, int) else sum(d[k] for d in per_seed) / len(per_seed))
                     for k, v in per_seed[0].items()}  # floor and token count are the same for every seed
    return out
