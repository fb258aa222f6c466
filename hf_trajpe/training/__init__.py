"""Training with accelerate, for ``recipes/finetune.py`` and the study (``hf_trajpe.study``): the
experiment config, model, data, optimizer and schedule of a run, atomic checkpoints and the training
loop (:class:`hf_trajpe.training.trainer.Trainer`). See ``docs/finetune.md``.

``import hf_trajpe.training`` imports torch; accelerate and transformers are imported when used.
"""

from .checkpoint import checkpoint_dirs, find_resume, latest_checkpoint, read_trainer_state, save_checkpoint
from .config import (
    ConfigError,
    DataConfig,
    EncodingConfig,
    ExperimentConfig,
    LoggingConfig,
    ModelConfig,
    OptimizerConfig,
    PoseConfig,
    ScheduleConfig,
    TrainConfig,
    apply_overrides,
    check_transformers_config,
    config_from_dict,
    load_config,
)
from .data import RunData, batch_indices, build_run_data, iterate_batches, iterate_rows, mask_tokens
from .files import RunFileError
from .model import auto_model_class, build_model, load_run_tokenizer, resolve_model_path
from .optimization import build_optimizer, build_scheduler, lr_factor
from .pose import PoSECollator, pose_position_ids

__all__ = [
    "ConfigError",
    "DataConfig",
    "EncodingConfig",
    "ExperimentConfig",
    "LoggingConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PoSECollator",
    "PoseConfig",
    "RunData",
    "RunFileError",
    "ScheduleConfig",
    "TrainConfig",
    "apply_overrides",
    "auto_model_class",
    "batch_indices",
    "build_model",
    "build_optimizer",
    "build_run_data",
    "build_scheduler",
    "check_transformers_config",
    "checkpoint_dirs",
    "config_from_dict",
    "find_resume",
    "iterate_batches",
    "iterate_rows",
    "latest_checkpoint",
    "load_config",
    "load_run_tokenizer",
    "lr_factor",
    "mask_tokens",
    "pose_position_ids",
    "read_trainer_state",
    "resolve_model_path",
    "save_checkpoint",
]
