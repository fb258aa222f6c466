"""``PatchHandle``: what :func:`hf_trajpe.patch` returns; undoes the patch, carries per-call inputs. Also
where a patched model keeps its handle (:func:`get_handle`), and saving the patch of a model (:func:`save_patch`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

from torch import nn

from ..monitoring import TrajectoryMonitor
from .config import PatchConfig
from .persistence import write_patch
from .state import PatchState

__all__ = ["HANDLE_ATTR", "PatchHandle", "get_handle", "save_patch", "target_model"]

#: the attribute of a patched model holding its active handle
HANDLE_ATTR = "_hf_trajpe_handle"


def target_model(model: nn.Module) -> nn.Module:
    """The transformers model that a patch goes into (the base model inside a PEFT model)."""
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
    return target_model(model).__dict__.get(HANDLE_ATTR)


def save_patch(model: nn.Module, directory: str | os.PathLike, *, _save_id: str | None = None) -> None:
    """Write ``hf_trajpe_config.json`` (and the learnable state, if any) of a patched model into ``directory``."""
    handle = get_handle(model)
    if handle is None:
        raise ValueError("this model is not patched by hf_trajpe; nothing to save")
    write_patch(handle, directory, _save_id)


class PatchHandle:
    """Returned by :func:`hf_trajpe.patch`. ``unpatch()`` restores the stock model; usable as a context manager.

    - ``config``: the :class:`PatchConfig` in force; ``plan``: what it resolved to on this model;
      ``state``: the ``nn.Module`` attached to the model as ``model.hf_trajpe`` (holds the strength;
      ``state.strength.value`` reads alpha).
    - ``texts(texts)``: a context manager giving ``strength="auto"`` the raw texts of the calls inside it.
    - ``set_tokenizer(tokenizer)``: for ``strength="auto"``, decode each batch's ``input_ids`` to
      detect its content type (decoding steps reuse the prompt's strength).
    """

    def __init__(self, model: nn.Module, config: PatchConfig, state: PatchState) -> None:
        self.model = model
        self.config = config
        self.state = state
        self.plan = state.plan
        self._undo: list[Callable[[], None]] = []
        self.active = True

    @contextlib.contextmanager
    def texts(self, texts: Sequence[str]) -> Iterator[None]:
        """Within the block, ``strength="auto"`` detects content types from ``texts`` (one per sequence of
        each batch); they are cleared when the block ends, even on error."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a sequence of strings, one per sequence of the batch")
        previous, self.state.call_texts = self.state.call_texts, list(texts)
        try:
            yield
        finally:
            self.state.call_texts = previous

    def set_texts(self, texts: Sequence[str] | None) -> None:
        """Texts for the next forward call only (then cleared); ``None`` clears them. Prefer :meth:`texts`."""
        if texts is not None and (isinstance(texts, str) or not all(isinstance(t, str) for t in texts)):
            raise TypeError("texts must be a sequence of strings, one per sequence of the batch")
        self.state.next_texts = None if texts is None else list(texts)

    def set_tokenizer(self, tokenizer) -> None:
        """Detect the content type of each batch from its decoded ``input_ids`` (``strength="auto"``).
        Texts given with :meth:`texts` take precedence; ``None`` turns decoding off."""
        if tokenizer is not None and not hasattr(tokenizer, "batch_decode"):
            raise TypeError(f"set_tokenizer needs a transformers tokenizer (with batch_decode), got {type(tokenizer)}")
        self.state.tokenizer = tokenizer

    @property
    def clamped_tokens(self) -> int:
        """Real tokens whose trajectory position was clamped at the position limit since patching."""
        return self.state.clamped_tokens

    @property
    def monitor(self) -> TrajectoryMonitor | None:
        """The attached :class:`~hf_trajpe.TrajectoryMonitor`, or ``None`` (the default: no overhead)."""
        return self.state.monitor

    def attach_monitor(self, monitor: TrajectoryMonitor | None = None) -> TrajectoryMonitor:
        """Record the counters of docs/spec.md, section 5, of every forward into ``monitor`` (a new one if
        omitted): encoding time and tokens/s for every encoding; displacement, clamped share, smoothness,
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
        self._detach()
        self.active = False

    def _detach(self) -> None:
        """Undo every change to the model, keeping this handle and its state (to be installed again)."""
        while self._undo:
            self._undo.pop()()

    def __enter__(self) -> PatchHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.unpatch()

    def __repr__(self) -> str:
        return f"PatchHandle({type(self.model).__name__}, {self.state.describe()}, active={self.active})"
