"""``patch``/``unpatch``/``save_patch``/``load_patch``/``from_pretrained`` and the handle.

Instances only: a class is never modified, so an unpatched model of the same class in the same
process is untouched. Every change is recorded in the handle and undone by ``unpatch``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable

from torch import nn

from ..monitoring import TrajectoryMonitor
from .base import (
    _STATE_ATTR,
    ATTENTION_NAMES,
    STATIC_ROPE_TYPES,
    PatchedPositionTable,
    PatchedRotary,
    PatchState,
    _get_path,
    bind_attention_modules,
    make_post_hook,
    make_pre_hook,
    register_attention,
)
from .config import PatchConfig
from .registry import get_adapter

__all__ = ["PatchHandle", "patch", "unpatch", "get_handle", "save_patch", "load_patch", "from_pretrained",
           "STATE_NAME"]

_HANDLE_ATTR = "_hf_trajpe_handle"
STATE_NAME = "hf_trajpe_state.safetensors"
MODULE_NAME = "hf_trajpe"


class PatchHandle:
    """Returned by :func:`patch`. ``unpatch()`` restores the stock model; usable as a context manager.

    - ``config``: the :class:`PatchConfig` in force; ``state``: the ``nn.Module`` attached to the
      model as ``model.hf_trajpe`` (holds the strength; ``state.strength.value`` reads alpha).
    - ``set_texts(texts)``: the raw texts of the next batches, for ``strength="auto"``.
    - ``set_tokenizer(tokenizer)``: for ``strength="auto"``, decode each batch's ``input_ids`` to
      detect its content type (no ``set_texts`` needed; decoding steps reuse the prompt's strength).
    """

    def __init__(self, model: nn.Module, config: PatchConfig, state: PatchState) -> None:
        self.model = model
        self.config = config
        self.state = state
        self._undo: list[Callable[[], None]] = []
        self.active = True

    def set_texts(self, texts: list[str] | None) -> None:
        self.state.texts = None if texts is None else list(texts)

    def set_tokenizer(self, tokenizer) -> None:
        """Detect the content type of each batch from its decoded ``input_ids`` (``strength="auto"``).
        Texts given with :meth:`set_texts` take precedence; ``None`` turns decoding off."""
        if tokenizer is not None and not hasattr(tokenizer, "batch_decode"):
            raise TypeError(f"set_tokenizer needs a transformers tokenizer (with batch_decode), got {type(tokenizer)}")
        self.state.tokenizer = tokenizer

    @property
    def monitor(self) -> TrajectoryMonitor | None:
        """The attached :class:`~hf_trajpe.TrajectoryMonitor`, or ``None`` (the default: no overhead)."""
        return self.state.monitor

    def attach_monitor(self, monitor: TrajectoryMonitor | None = None) -> TrajectoryMonitor:
        """Record SPEC section 5 counters of every forward into ``monitor`` (a new one if omitted):
        encoding time and tokens/s for every encoding; displacement, clamped share, smoothness,
        fallbacks and cache hits for ``trajectory``. Returns the monitor; ``monitor.as_dict()`` reads it."""
        self.state.monitor = monitor if monitor is not None else TrajectoryMonitor()
        return self.state.monitor

    def detach_monitor(self) -> TrajectoryMonitor | None:
        monitor, self.state.monitor = self.state.monitor, None
        return monitor

    def save(self, directory: str | os.PathLike) -> None:
        save_patch(self.model, directory)

    def unpatch(self) -> None:
        if not self.active:
            return
        while self._undo:
            self._undo.pop()()
        self.active = False

    def __enter__(self) -> PatchHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.unpatch()

    def __repr__(self) -> str:
        return f"PatchHandle({type(self.model).__name__}, {self.state.describe()}, active={self.active})"


def _target(model: nn.Module) -> nn.Module:
    from transformers import PreTrainedModel

    if isinstance(model, PreTrainedModel):
        return model
    if hasattr(model, "get_base_model"):  # a PEFT model: patch the transformers model inside
        inner = model.get_base_model()
        if isinstance(inner, PreTrainedModel):
            return inner
    raise TypeError(f"hf_trajpe.patch needs a transformers PreTrainedModel, got {type(model).__name__}")


def get_handle(model: nn.Module) -> PatchHandle | None:
    """The active handle of a patched model, or ``None``."""
    return _target(model).__dict__.get(_HANDLE_ATTR)


def embedding_matched_scale(model: nn.Module) -> float:
    """The sinusoid amplitude whose RMS equals the RMS of the token embedding matrix.

    An interleaved unit sinusoid has RMS ``1/sqrt(2)`` over its width, hence the ``sqrt(2)``."""
    weight = model.get_input_embeddings().weight.detach()
    rms = weight.float().pow(2).mean().sqrt().item()
    if not math.isfinite(rms) or rms <= 0:
        raise ValueError(f"cannot match the sinusoid to token embeddings of RMS {rms}; pass a number as sinusoid_scale")
    return math.sqrt(2.0) * rms


def patch(model: nn.Module, encoding: str | PatchConfig = "native", **options) -> PatchHandle:
    """Swap the positional encoding of ``model`` in place; returns a :class:`PatchHandle`.

    ``encoding``: ``native``, ``sinusoidal``, ``rope``, ``alibi``, ``none`` or ``trajectory`` (or a
    ready :class:`PatchConfig`); ``options``: the other fields of :class:`PatchConfig`.
    """
    model = _target(model)
    if isinstance(encoding, PatchConfig):
        if options:
            raise TypeError("pass either a PatchConfig or an encoding name with options, not both")
        config = encoding
    else:
        fields = {f.name for f in dataclasses.fields(PatchConfig)} - {"encoding", "version"}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise TypeError(
                f"unknown patch option(s) {unknown}; supported options: {', '.join(sorted(fields))}"
            )
        config = PatchConfig(encoding, **options)
    if get_handle(model) is not None:
        raise RuntimeError("this model is already patched; call hf_trajpe.unpatch(model) first")
    family = get_adapter(model.config.model_type)
    if config.encoding not in family.encodings:
        raise ValueError(
            f"{family.name} does not support encoding {config.encoding!r}; "
            f"supported: {', '.join(family.encodings)}"
        )
    bad_base = config.base is not None and config.base not in family.trajectory_bases
    if config.encoding == "trajectory" and bad_base:
        raise ValueError(
            f"{family.name} does not support trajectory on {config.base!r}; supported bases: "
            f"{', '.join(family.trajectory_bases)}"
        )
    base = model.base_model
    if config.sinusoid_scale == "embeddings":
        config = dataclasses.replace(config, sinusoid_scale=embedding_matched_scale(model))
    state = PatchState(config, family, model.config, base)
    param = next(model.parameters(), None)
    if param is not None:
        state.to(device=param.device)

    # checks before any change, so a refused patch leaves the model untouched
    attn_stock = model.config._attn_implementation
    if state.uses_attention and attn_stock not in ATTENTION_NAMES:
        raise NotImplementedError(
            f"{state.describe()} needs a bias or rotary inside attention, available for attention "
            f"implementations {', '.join(ATTENTION_NAMES)}; this model uses {attn_stock!r} "
            "(load it with attn_implementation='sdpa' or 'eager')"
        )
    if family.rotary_path:
        rotary = _get_path(base, family.rotary_path)[2]
        rope_type = getattr(rotary, "rope_type", "default")
        if rope_type not in STATIC_ROPE_TYPES:
            raise NotImplementedError(
                f"rope_type {rope_type!r} rescales frequencies at run time; supported rope types: "
                f"{', '.join(STATIC_ROPE_TYPES)}"
            )

    handle = PatchHandle(model, config, state)
    undo = handle._undo
    try:
        model.add_module(MODULE_NAME, state)
        undo.append(lambda: model._modules.pop(MODULE_NAME, None))
        for path, cls in ((family.table_path, PatchedPositionTable), (family.rotary_path, PatchedRotary)):
            if path is None:
                continue
            parent, name, stock = _get_path(base, path)
            setattr(parent, name, cls(stock, state))
            undo.append(lambda parent=parent, name=name, stock=stock: setattr(parent, name, stock))
        if state.uses_attention:
            register_attention()
            model.set_attn_implementation(ATTENTION_NAMES[attn_stock])
            undo.append(lambda: model.set_attn_implementation(attn_stock))
            bind_attention_modules(base, family, state)
            undo.append(lambda: bind_attention_modules(base, family, None))
        pre = base.register_forward_pre_hook(make_pre_hook(state, base, model.config), with_kwargs=True)
        post = base.register_forward_hook(make_post_hook(state), with_kwargs=True)
        undo.append(pre.remove)
        undo.append(post.remove)
        model.save_pretrained = _make_save_pretrained(model, attn_stock)
        undo.append(lambda: model.__dict__.pop("save_pretrained", None))
        model.__dict__[_HANDLE_ATTR] = handle
        undo.append(lambda: model.__dict__.pop(_HANDLE_ATTR, None))
    except Exception:
        handle.unpatch()
        raise
    return handle


def unpatch(model_or_handle: nn.Module | PatchHandle) -> None:
    """Restore the stock model (same modules, attention implementation and outputs)."""
    if isinstance(model_or_handle, PatchHandle):
        model_or_handle.unpatch()
        return
    handle = get_handle(model_or_handle)
    if handle is None:
        raise ValueError("this model is not patched by hf_trajpe")
    handle.unpatch()


def _make_save_pretrained(model: nn.Module, attn_stock: str) -> Callable:
    stock_save = type(model).save_pretrained

    def save_pretrained(save_directory, *args, **kwargs):
        """Stock ``save_pretrained`` (weights and config exactly as unpatched) plus
        ``hf_trajpe_config.json`` and the patch state; reload with ``hf_trajpe.from_pretrained``."""
        state_dict = kwargs.get("state_dict")
        if state_dict is not None:
            prefix = MODULE_NAME + "."
            kwargs["state_dict"] = {k: v for k, v in state_dict.items() if not k.startswith(prefix)}
        state = model._modules.pop(MODULE_NAME)
        attn_now = model.config._attn_implementation
        model.config._attn_implementation_internal = attn_stock
        try:
            stock_save(model, save_directory, *args, **kwargs)
        finally:
            model.config._attn_implementation_internal = attn_now
            model._modules[MODULE_NAME] = state
        if kwargs.get("is_main_process", True):
            save_patch(model, save_directory)

    return save_pretrained


def save_patch(model: nn.Module, directory: str | os.PathLike) -> None:
    """Write ``hf_trajpe_config.json`` (and the learnable state, if any) into ``directory``."""
    handle = get_handle(model)
    if handle is None:
        raise ValueError("this model is not patched by hf_trajpe; nothing to save")
    handle.config.save(directory)
    tensors = {k: v.detach().contiguous().cpu() for k, v in handle.state.state_dict().items()}
    path = os.path.join(directory, STATE_NAME)
    if tensors:
        from safetensors.torch import save_file

        save_file(tensors, path)
    elif os.path.exists(path):
        os.remove(path)


def load_patch(model: nn.Module, directory: str | os.PathLike) -> PatchHandle:
    """Patch a freshly loaded stock model as saved in ``directory``: the Auto class plus this call."""
    handle = patch(model, PatchConfig.load(directory))
    path = os.path.join(directory, STATE_NAME)
    if os.path.exists(path):
        from safetensors.torch import load_file

        handle.state.load_state_dict(load_file(path, device=str(next(model.parameters()).device)))
    return handle


def from_pretrained(directory: str | os.PathLike, model_class=None, **kwargs) -> nn.Module:
    """Load a model saved from a patched model, patched again (``kwargs`` go to ``from_pretrained``).

    ``model_class`` defaults to the class named in ``config.json``'s ``architectures``.
    """
    import transformers

    if model_class is None:
        config = transformers.AutoConfig.from_pretrained(directory)
        archs = getattr(config, "architectures", None) or []
        if not archs or not hasattr(transformers, archs[0]):
            raise ValueError(
                f"cannot tell the model class from {directory!r} (architectures={archs}); pass model_class="
            )
        model_class = getattr(transformers, archs[0])
    model = model_class.from_pretrained(directory, **kwargs)
    load_patch(model, directory)
    return model


# re-exported for tests
STATE_ATTR = _STATE_ATTR
