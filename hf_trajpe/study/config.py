"""What every study YAML (``configs/study/*.yaml``) shares, whatever its suite: the training section, the
checks of seeds, model, workers, encodings and comparisons, the experiment config (:mod:`hf_trajpe.training`)
each run trains with, and the reading of the file with its ``quick:`` profile and ``key=value`` overrides.

Reuses the experiment config's parser (unknown keys fail naming the closest valid one and the valid
keys; dotted ``key=value`` overrides), and its checks: the ``model`` section is a transformers config
checked key by key, and every encoding's experiment config is validated like a recipe's. The suite's own
sections live with it (``suites/<name>/config.py``); :mod:`.loading` picks the suite.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from ..paths import check_name
from ..training.config import (
    ConfigError,
    ExperimentConfig,
    check_transformers_config,
    config_from_dict,
    read_yaml,
)
from ..training.typed_config import apply_overrides
from ..training.yaml_files import BASE_KEY, read_config_file

__all__ = ["NATIVE", "StudyTrain", "experiment_config", "patch_options", "patch_value", "read_study_data",
           "training_encoding"]

#: the encoding name in ``encodings`` that means "the model as built, not patched"
NATIVE = "native"


@dataclass
class StudyTrain:
    steps: int = 600
    batch_size: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    max_grad_norm: float = 1.0
    log_every: int = 25



def check_encoding_names(encodings: dict) -> None:
    """At least one encoding, each named so that its runs' folders (``<name>_s<seed>``) stay inside
    ``output_dir/models`` (:func:`hf_trajpe.paths.check_name`)."""
    if not isinstance(encodings, dict) or not encodings:
        raise ConfigError("encodings: at least one encoding is needed (a mapping of name -> patch options)")
    for name in encodings:
        try:
            check_name(name, "encodings")
        except ValueError as err:
            raise ConfigError(str(err)) from None


def check_training_sections(cfg) -> None:
    """The checks a study config's seeds, model, workers and train sections share (content and task studies)."""
    if not cfg.seeds or len(set(cfg.seeds)) != len(cfg.seeds):
        raise ConfigError(f"seeds: a non-empty list of distinct integers, got {cfg.seeds}")
    check_transformers_config(cfg.model, "model")
    if cfg.workers < 1:
        raise ConfigError(f"workers must be >= 1, got {cfg.workers}")
    for key in ("steps", "batch_size", "log_every"):
        if getattr(cfg.train, key) < 1:
            raise ConfigError(f"train.{key} must be >= 1, got {getattr(cfg.train, key)}")
    if not cfg.train.lr > 0 or cfg.train.warmup_steps < 0:
        raise ConfigError(f"train: lr must be > 0 and warmup_steps >= 0, got {cfg.train.lr} and "
                          f"{cfg.train.warmup_steps}")


def check_comparisons(pairs: list, encodings: dict) -> None:
    """``comparisons``: each a ``[model, reference]`` pair of two different encodings of the study."""
    for pair in pairs:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(n in encodings for n in pair)
                and pair[0] != pair[1]):
            raise ConfigError(f"comparisons: each entry is [model, reference], two different names of encodings "
                              f"{list(encodings)}; got {pair!r}")


def check_margin(margin: float) -> None:
    if not margin > 0:
        raise ConfigError(f"equivalence_margin must be > 0 (the bound of 'no effect'), got {margin}")


def patch_options(opts: dict) -> dict | None:
    """The keyword arguments of ``hf_trajpe.patch`` for one encoding entry (``None``: not patched)."""
    opts = dict(opts)
    if opts.get("encoding") == NATIVE and len(opts) == 1:
        return None
    return opts


def patch_value(opts: dict):
    """The ``PatchConfig`` of one encoding entry as ``hf_trajpe.patch`` takes it (``{encoding: cope, npos_max: 256}``:
    a scheme's own options beside the common ones; ``layers: every:4`` for some layers), or the ``LayerMap`` of an
    entry whose ``encoding`` is a layer map (``{encoding: {"every:4:3": none, "0-1": {encoding: alibi}}}``)."""
    from ..patching import PatchConfig

    opts = dict(opts)
    encoding = opts.pop("encoding")
    if isinstance(encoding, dict):
        from ..patching import LayerMap

        if opts:
            raise ValueError(f"a layer map ({{selection: encoding}}) carries the options of each entry; "
                             f"{', '.join(sorted(opts))} beside it would apply to none: move them into its entries")
        return LayerMap.from_spec(encoding)
    return PatchConfig.from_options(encoding, **opts)


def check_layers_on_model(model: dict, encodings: dict) -> None:
    """Patch the study's model (built once from its config, on the CPU, the global random state untouched) with
    every encoding entry that names layers, so a selection the model cannot take (GPT-2's learned table, a layer
    it does not have, overlapping selections) fails here, naming the entry, before any data or training."""
    from ..patching import LayerMap

    values = {name: patch_value(opts) for name, opts in encodings.items() if patch_options(opts) is not None}
    layered = {name: v for name, v in values.items() if isinstance(v, LayerMap) or v.layers is not None}
    if not layered:
        return
    import torch
    import transformers

    from ..patching import patch

    options = dict(model)
    config = transformers.AutoConfig.for_model(options.pop("model_type"), **options)
    with torch.random.fork_rng(devices=[]):
        built = transformers.AutoModelForCausalLM.from_config(config)
    for name, value in layered.items():
        try:
            patch(built, value).unpatch()
        except (NotImplementedError, TypeError, ValueError) as err:
            raise ConfigError(f"encodings.{name}: {err}") from None


def training_encoding(opts: dict | None) -> dict | None:
    """The ``encoding`` section of an experiment config (:class:`~hf_trajpe.training.config.EncodingConfig`) for
    the flat patch options of a study entry (``None``: not patched)."""
    if opts is None:
        return None
    opts = dict(opts)
    encoding = opts.pop("encoding")
    if not isinstance(encoding, dict):
        return {"name": encoding, "options": opts}
    layers = {}
    for selection, entry in encoding.items():
        if isinstance(entry, dict):
            entry = dict(entry)
            layers[selection] = {"name": entry.pop("encoding", None), "options": entry}
        else:
            layers[selection] = entry
    return {"layers": layers}


def experiment_config(cfg, name: str, options: dict | None, seed: int,
                      output_dir: str | Path, data: dict | None = None) -> ExperimentConfig:
    """The experiment config one study run trains with (``Trainer`` of :mod:`hf_trajpe.training`, the
    recipe's loop): the ``model`` transformers config from scratch (causal LM), patched with ``options``
    (None: the model as built), the content types under ``output_dir/data`` in equal shares (the data
    folder of the study, its types in alphabetical order) drawn at random with replacement from ``seed``,
    AdamW with a linear warm-up then linear decay to 10% of ``train.lr``, on the CPU, nothing logged.
    ``data``: another data section (the task study's, :mod:`hf_trajpe.study.suites.tasks.config`)."""
    from ..data.registry import names

    t = cfg.train
    encoding = training_encoding(options)
    if data is None:
        data = {"path": str(Path(cfg.output_dir) / "data"), "content_types": sorted(names()),
                "train": cfg.data.train, "validation": 0, "test": cfg.data.test, "seed": cfg.data.seed,
                "block_size": cfg.data.block_size, "balance": True, "order": "random"}
    return config_from_dict({
        "name": f"{name}_s{seed}", "output_dir": str(output_dir), "seed": seed,
        "model": {"config": dict(cfg.model), "task": "clm", "tokenizer": cfg.tokenizer},
        "encoding": encoding,
        "data": data,
        "optimizer": {"name": "adamw", "lr": t.lr, "weight_decay": t.weight_decay},
        "schedule": {"name": "linear", "warmup_steps": t.warmup_steps, "min_lr_ratio": 0.1},
        "train": {"max_steps": t.steps, "batch_size": t.batch_size, "max_grad_norm": t.max_grad_norm,
                  "mixed_precision": "no", "log_every": t.log_every, "device": "cpu"},
        "logging": {"trackers": [], "progress": False},
    })


def read_study_data(path: str | Path, quick: bool = False, overrides: list[str] | None = None) -> dict:
    """A study YAML as a mapping, ``quick`` applying its ``quick:`` overrides, then ``overrides``. A ``base:`` key
    names a study YAML (relative to this one) whose keys this one's deep-merge over
    (:func:`~hf_trajpe.training.yaml_files.read_config_file`: mappings merge key by key unless tagged
    ``!replace``, other values replace; a cycle of bases is refused)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"study config {str(path)!r} does not exist (see configs/study/default.yaml)")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a study config must be a mapping of keys, got {type(data).__name__}")
    data = read_config_file(path) if BASE_KEY in data else copy.deepcopy(data)  # its base files under it
    try:
        if quick:
            profile = data.get("quick") or []
            if not profile:
                raise ConfigError("--quick: this config has no 'quick:' list of overrides")
            data = apply_overrides(data, list(profile))
        return apply_overrides(data, overrides or [])
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
