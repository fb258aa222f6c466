"""Fine-tuning with accelerate (``recipes/finetune.py``): the experiment config, model and data of a
run, atomic checkpoints and the training loop. See ``docs/finetune.md``.

``import hf_trajpe.training`` imports torch; accelerate and transformers are imported when used.
"""

from .checkpoint import checkpoint_dirs, latest_checkpoint, read_trainer_state, save_checkpoint
from .config import (
    ConfigError,
    DataConfig,
    EncodingConfig,
    ExperimentConfig,
    LoggingConfig,
    ModelConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainConfig,
    apply_overrides,
    config_from_dict,
    load_config,
)
from .data import RunData, batch_indices, build_run_data, iterate_batches, mask_tokens
from .model import build_model, load_run_tokenizer, resolve_model_path

__all__ = [
    "ConfigError",
    "DataConfig",
    "EncodingConfig",
    "ExperimentConfig",
    "LoggingConfig",
    "ModelConfig",
    "OptimizerConfig",
    "RunData",
    "ScheduleConfig",
    "TrainConfig",
    "apply_overrides",
    "batch_indices",
    "build_model",
    "build_run_data",
    "checkpoint_dirs",
    "config_from_dict",
    "iterate_batches",
    "latest_checkpoint",
    "load_config",
    "load_run_tokenizer",
    "mask_tokens",
    "read_trainer_state",
    "resolve_model_path",
    "save_checkpoint",
]
