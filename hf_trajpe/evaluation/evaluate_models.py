"""Evaluate models on the content types, at several context lengths, with deltas against a baseline.

    >>> from hf_trajpe.evaluation import evaluate_models, write_report
    >>> result = evaluate_models({"learned": [m0, m1], "rope": [r0, r1]}, baseline="learned",
    ...                          block_size=128, length_multipliers=(1, 2, 4))
    >>> write_report(result, "outputs/eval")

``models`` maps a name (an encoding) to one model or a list of models (one per training seed). A
model is an in-memory ``PreTrainedModel`` (anything taking ``input_ids``/``attention_mask`` and
returning ``.logits``), a local folder or a ``.gguf`` file (:mod:`hf_trajpe.loading`): folders saved from
a model patched by :func:`hf_trajpe.patch` (they hold ``hf_trajpe_config.json``) load with
``hf_trajpe.from_pretrained``, others with transformers' Auto classes.

Test data: the test split of each content type (built on the fly, or from ``data_dir`` written by
``hf-trajpe data build``), tokenized into one stream per type. At each context length
``m * block_size`` the same tokens are cut into blocks, so every length sees the same text; the
number of blocks at the longest length is ``max_sequences`` at most.

A length a model cannot run (a learned position table too short) is recorded as skipped with the
error, not raised.
"""

from __future__ import annotations

import datetime as _dt
import gc
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .bootstrap import delta_with_intervals
from .claims import CLAIMED_IMPROVEMENT, CLAIMED_STRENGTH, CONTROL_TYPE, HARNESS_PROBLEM, verdict
from .scoring import detect_mode, score_blocks
from .verdicts import DEFAULT_MARGIN, equivalent, judge_family, plain_verdict, significance

__all__ = ["EvaluationResult", "evaluate_models", "load_model", "content_streams", "judge_deltas", "paired_deltas"]


@dataclass
class EvaluationResult:
    """Everything a report needs. ``scores[model][type][length]``: a list (one per seed) of
    :class:`~hf_trajpe.evaluation.scoring.Scores`, or a ``str`` (why that length was skipped).
    ``deltas[model][type][length]``: the output of ``delta_with_intervals`` plus the verdicts (see
    :func:`paired_deltas`)."""

    meta: dict
    models: dict
    scores: dict = field(default_factory=dict)
    deltas: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        results: dict = {}
        for name, per_type in self.scores.items():
            results[name] = {}
            for ctype, per_len in per_type.items():
                results[name][ctype] = {}
                for length, seeds in per_len.items():
                    if isinstance(seeds, str):
                        results[name][ctype][str(length)] = {"skipped": seeds}
                        continue
                    per_seed = [s.summary() for s in seeds]
                    ppl = float(np.mean([s["perplexity"] for s in per_seed]))
                    results[name][ctype][str(length)] = {
                        "perplexity": ppl,
                        "cross_entropy": float(np.mean([s["cross_entropy"] for s in per_seed])),
                        "accuracy": float(np.mean([s["accuracy"] for s in per_seed])),
                        "n_tokens": per_seed[0]["n_tokens"], "n_sequences": per_seed[0]["n_sequences"],
                        "per_seed": per_seed,
                    }
        deltas = {m: {t: {str(k): v for k, v in d.items()} for t, d in per_t.items()}
                  for m, per_t in self.deltas.items()}
        return {"meta": self.meta, "models": self.models, "results": results, "deltas": deltas}

    @property
    def harness_problems(self) -> list[str]:
        return [f"{m} on {t} at {length} tokens: delta {d['delta_pct']:+.2f}% "
                f"[{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]"
                for m, per_t in self.deltas.items() for t, per_len in per_t.items()
                for length, d in per_len.items() if d["verdict"].startswith("HARNESS")]


def load_model(spec):
    """An in-memory model is returned as is; a local folder or a ``.gguf`` file is loaded (see module
    docstring) through :mod:`hf_trajpe.loading`. A GGUF file holds a causal LM and no patch."""
    if not isinstance(spec, (str, os.PathLike)):
        return spec
    import transformers

    from ..loading import is_gguf, require_model_config, resolve_source
    from ..loading import load_model as load_source

    path = resolve_source(spec)
    require_model_config(path)
    if is_gguf(path):
        return load_source(path, transformers.AutoModelForCausalLM)
    if (path / "hf_trajpe_config.json").exists():
        from ..patching import from_pretrained

        return from_pretrained(str(path))
    config = transformers.AutoConfig.from_pretrained(str(path))
    archs = getattr(config, "architectures", None) or []
    if any("MaskedLM" in a for a in archs):
        return load_source(path, transformers.AutoModelForMaskedLM)
    return load_source(path, transformers.AutoModelForCausalLM)


def describe_model(model, spec) -> dict:
    info = {"class": type(model).__name__, "source": str(spec) if isinstance(spec, (str, os.PathLike)) else "in-memory",
            "parameters": int(sum(p.numel() for p in model.parameters()))}
    config = getattr(model, "config", None)
    if config is not None:
        info["model_type"] = getattr(config, "model_type", None)
    try:
        from ..patching import get_handle

        handle = get_handle(model)
        if handle is not None:
            info["hf_trajpe_patch"] = handle.state.describe() if hasattr(handle.state, "describe") else str(handle)
    except Exception:  # not a transformers model, or patching unavailable
        pass
    return info


def content_streams(content_types: Sequence[str], tokenizer, mode: str, data_dir=None, n_test: int = 200,
                 seed: int = 0, min_chars: int | None = None, split: str = "test") -> dict[str, list[int]]:
    """``{type: token ids}``: each type's test split as one stream (documents joined by eos / [SEP]);
    ``split``: another split of the saved datasets in ``data_dir`` (``validation``, to choose a setting)."""
    from ..data import DEFAULT_MIN_CHARS, build_dataset, load_datasets, pack_token_stream

    if split != "test" and data_dir is None:
        raise ValueError(f"the {split!r} split is read from saved datasets: give data_dir")
    if data_dir is not None:
        test = {t: dd[split] for t, dd in load_datasets(data_dir, content_types).items()}
    else:
        test = {t: build_dataset(t, train=0, validation=0, test=n_test, seed=seed,
                                 min_chars=min_chars or DEFAULT_MIN_CHARS)["test"] for t in content_types}
    sep = tokenizer.sep_token_id if mode == "mlm" else tokenizer.eos_token_id
    return {t: pack_token_stream(ds, tokenizer, sep) for t, ds in test.items()}


def _blocks(stream: list[int], length: int, n_tokens: int, mode: str, tokenizer) -> torch.Tensor:
    ids = torch.tensor(stream[:n_tokens], dtype=torch.long)
    if mode == "clm":
        return ids.view(-1, length)
    inner = ids[: (n_tokens // length) * (length - 2)].view(-1, length - 2)
    cls = torch.full((inner.shape[0], 1), tokenizer.cls_token_id, dtype=torch.long)
    sep = torch.full((inner.shape[0], 1), tokenizer.sep_token_id, dtype=torch.long)
    return torch.cat([cls, inner, sep], 1)


def evaluate_models(models: Mapping[str, object], baseline: str | None = None, content_types=None,
                    tokenizer="byte", block_size: int = 128, length_multipliers: Sequence[int] = (1,),
                    max_sequences: int = 64, n_test: int = 200, data_dir=None, data_seed: int = 0,
                    mode: str | None = None, batch_size: int = 16, n_resamples: int = 2000,
                    level: float = 0.95, bootstrap_seed: int = 0, progress: bool = True,
                    equivalence_margin: float = DEFAULT_MARGIN) -> EvaluationResult:
    """Evaluate every model on every content type and length; deltas of each model against ``baseline``,
    each with a significance verdict and whether it is equivalent within ``±equivalence_margin`` percent.

    ``max_sequences``: test blocks at the longest length (``max(length_multipliers) * block_size``);
    shorter lengths cut the same tokens into more blocks.
    """
    from tqdm.auto import tqdm

    from ..data import load_tokenizer
    from ..data.registry import names as registered_names

    if not models:
        raise ValueError("no models to evaluate")
    specs = {name: list(v) if isinstance(v, (list, tuple)) else [v] for name, v in models.items()}
    baseline = baseline or next(iter(specs))
    if baseline not in specs:
        raise ValueError(f"baseline {baseline!r} is not among the models {list(specs)}")
    content_types = list(content_types or registered_names())
    multipliers = sorted({int(m) for m in length_multipliers})
    lengths = [m * block_size for m in multipliers]
    tok = load_tokenizer(tokenizer)

    first = load_model(specs[baseline][0])
    mode = mode or detect_mode(first)
    streams = content_streams(content_types, tok, mode, data_dir=data_dir, n_test=n_test, seed=data_seed)
    longest = lengths[-1]
    budget = {t: min(len(s) // longest, max_sequences) * longest for t, s in streams.items()}
    short = [t for t, n in budget.items() if n == 0]
    if short:
        raise ValueError(f"test data of {short} is shorter than one block of {longest} tokens; raise n_test")

    result = EvaluationResult(
        meta={"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "hf_trajpe_version": _version(), "baseline": baseline, "mode": mode,
              "tokenizer": tokenizer if isinstance(tokenizer, str) else type(tok).__name__,
              "block_size": block_size, "length_multipliers": multipliers, "lengths": lengths,
              "content_types": content_types, "tokens_per_type": budget, "n_test_documents": n_test,
              "data": str(data_dir) if data_dir else f"test splits built here (hf_trajpe.data), seed {data_seed}",
              "n_resamples": n_resamples, "level": level, "bootstrap_seed": bootstrap_seed,
              "equivalence_margin": equivalence_margin,
              "delta_definition": "(ppl_base - ppl_enc) / ppl_base * 100; positive = better than baseline"},
        models={})
    total = sum(len(v) for v in specs.values()) * sum(budget[t] // length for t in content_types for length in lengths)
    bar = tqdm(total=total, desc="evaluating", unit="seq", disable=not progress)
    for name, seeds in specs.items():
        result.scores[name] = {t: {length: [] for length in lengths} for t in content_types}
        result.models[name] = []
        for i, spec in enumerate(seeds):
            model = first if (name == baseline and i == 0) else load_model(spec)
            result.models[name].append(describe_model(model, spec))
            for t in content_types:
                for length in lengths:
                    bar.set_postfix_str(f"{name}[{i}] {t} {length}")
                    blocks = _blocks(streams[t], length, budget[t], mode, tok)
                    cell = result.scores[name][t]
                    if isinstance(cell[length], str):
                        bar.update(blocks.shape[0])
                        continue
                    try:
                        cell[length].append(score_blocks(model, blocks, mode, batch_size, tok,
                                                         mask_seed=data_seed, progress=bar.update))
                    except (IndexError, RuntimeError) as err:  # e.g. a learned position table too short
                        cell[length] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            if model is not first:
                del model
                gc.collect()
    bar.close()
    for name in result.scores:
        if name != baseline:
            result.deltas[name] = paired_deltas(result, baseline, name, n_resamples, level, bootstrap_seed,
                                                margin=equivalence_margin)
    result.meta["family_size"] = judge_deltas([(name, baseline, d) for name, d in result.deltas.items()],
                                              equivalence_margin, level)
    return result


def judge_deltas(comparisons: list[tuple[str, str, dict]], margin: float, level: float = 0.95,
                 correction: str = "holm", unseen: int = 0) -> int:
    """The declared ``correction`` (Holm's by default, or ``bh``) across every delta of ``comparisons``
    (``(model, reference, {type: {length: delta}})``, the comparisons one report shows;
    :func:`~hf_trajpe.evaluation.verdicts.judge_family`): each delta's
    ``significance``, ``equivalent`` and ``verdict`` then come from adjusted p-values (a comparison shown
    twice counts once). On ``random_content`` an improvement whose own interval excludes 0 stays flagged
    (``HARNESS_PROBLEM``), unadjusted: an alarm must not go deaf because the report has many rows.
    ``unseen``: comparisons of the family left out of ``comparisons`` (:func:`~.seed_inference.holm`).
    Returns the family size."""
    family, keys = [], {}
    for model, ref, per_type in comparisons:
        for t, per_len in per_type.items():
            for length, d in per_len.items():
                family.append(d)
                keys[id(d)] = (model, ref, t, length)
    n = judge_family(family, "delta_pct", margin, level, key=lambda d: keys[id(d)], unseen=unseen,
                     correction=correction)
    for d in family:
        if keys[id(d)][2] == CONTROL_TYPE and d["ci"][0] > 0:
            d["verdict"] = HARNESS_PROBLEM
    return n


def paired_deltas(result: EvaluationResult, base: str, other: str, n_resamples: int = 2000, level: float = 0.95,
                  seed: int = 0, margin: float = DEFAULT_MARGIN, claims: bool = False) -> dict:
    """``{type: {length: delta}}`` of model ``other`` against model ``base`` of ``result``, paired by
    seed and test sequence (:func:`~hf_trajpe.evaluation.bootstrap.delta_with_intervals`); a length either
    model skipped is left out. Each delta gets ``significance`` (better/worse/no significant difference),
    ``equivalent`` (TOST within ``±margin`` percent), ``margin`` and ``verdict`` (the two in words; on
    ``random_content`` a significant improvement is ``HARNESS_PROBLEM``). ``claims``: also the seed design's
    claimed ranges and ``claim_verdict``, only for a trajectory model against its own base encoding.
    These verdicts are the comparison's alone; a report re-judges its comparisons together
    (:func:`judge_deltas`, Holm)."""
    out: dict = {}
    for t, per_len in result.scores[other].items():
        out[t] = {}
        for length, seeds in per_len.items():
            b = result.scores[base][t][length]
            if isinstance(seeds, str) or isinstance(b, str):
                continue
            d = delta_with_intervals(np.stack([s.nll for s in b]), np.stack([s.count for s in b]),
                                     np.stack([s.nll for s in seeds]), np.stack([s.count for s in seeds]),
                                     n_resamples=n_resamples, level=level, seed=seed)
            d["significance"] = significance(d["ci"])
            d["equivalent"] = equivalent(d["ci_equivalence"], margin)
            d["margin"] = margin
            d["verdict"] = plain_verdict(d["ci"], d["ci_equivalence"], margin)
            if t == CONTROL_TYPE and d["ci"][0] > 0:
                d["verdict"] = HARNESS_PROBLEM
            if claims:
                d["claimed_improvement"] = CLAIMED_IMPROVEMENT.get(t)
                d["claimed_best_strength"] = CLAIMED_STRENGTH.get(t)
                d["claim_verdict"] = verdict(d["ci"], t)
            out[t][length] = d
    return out


def _version() -> str:
    try:
        from .. import __version__

        return __version__
    except ImportError:
        return "unknown"
