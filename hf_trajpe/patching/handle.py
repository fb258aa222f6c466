"""``PatchHandle``: what :func:`hf_trajpe.patch` returns; undoes the patch, carries per-call inputs.
``LayerMapHandle``: several patches of one model on disjoint layers, as one handle. ``Installation``: what a
patched model carries (its patches, installed together, and the steps that undo them), where it keeps it
(:func:`get_handle`), and saving the patches of a model (:func:`save_patch`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

from torch import nn

from ..monitoring import TrajectoryMonitor
from .config import PatchConfig
from .layer_map import LayerMap
from .persistence import write_patch
from .state import PatchState, PatchStates

__all__ = ["HANDLE_ATTR", "Installation", "LayerMapHandle", "PatchHandle", "get_handle", "save_patch",
           "target_model"]

#: the attribute of a patched model holding its :class:`Installation`
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


def get_handle(model: nn.Module) -> PatchHandle | LayerMapHandle | None:
    """The handle of everything a patched model carries (its :class:`PatchHandle` when it carries one patch, a
    :class:`LayerMapHandle` over its patches when several on disjoint layers), or ``None``."""
    installation = target_model(model).__dict__.get(HANDLE_ATTR)
    return installation.model_handle() if installation is not None else None


def save_patch(model: nn.Module, directory: str | os.PathLike, *, _save_id: str | None = None) -> None:
    """Write ``hf_trajpe_config.json`` (and the learnable state, if any) of a patched model into ``directory``:
    every patch the model carries (a layer map when there are several)."""
    installation = target_model(model).__dict__.get(HANDLE_ATTR)
    if installation is None:
        raise ValueError("this model is not patched by hf_trajpe; nothing to save")
    write_patch(installation.handles, directory, _save_id)


class Installation:
    """The patches of one model, installed together: one :class:`PatchHandle` each (a patch of every layer is
    alone; patches with layer selections may be several, on disjoint layers), and the steps that undo the
    installation (run in reverse by :meth:`detach`). Adding or removing a patch takes the whole installation off
    (the stock model again, bit for bit) and installs the new set of patches, with their own states (learned
    values kept), through ``install`` (``api._install``)."""

    def __init__(self, model: nn.Module, handles: Sequence[PatchHandle],
                 install: Callable[[Installation], None]) -> None:
        self.model = model
        self.handles = list(handles)
        self.undo: list[Callable[[], None]] = []
        self._install = install

    def install(self) -> None:
        for handle in self.handles:
            handle._installation = self
        self._install(self)

    def detach(self) -> None:
        """Undo every change to the model, keeping the handles and their states (to be installed again)."""
        while self.undo:
            self.undo.pop()()

    def remove(self, handles: Sequence[PatchHandle]) -> None:
        """Take ``handles`` off the model; the other patches stay in force (installed again without them)."""
        self.detach()
        for handle in handles:
            self.handles.remove(handle)
            handle.active = False
            handle._installation = None
        if self.handles:
            try:
                self.install()
            except Exception:
                for handle in self.handles:
                    handle.active = False
                raise

    def model_handle(self) -> PatchHandle | LayerMapHandle:
        return self.handles[0] if len(self.handles) == 1 else LayerMapHandle(self.handles)


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
        #: the installation this handle's patch is part of (set when installed)
        self._installation: Installation | None = None
        self.active = True

    @property
    def attn_stock(self) -> str:
        """The model's own attention implementation (the one our attention functions wrap)."""
        return self.plan.attn_stock

    @property
    def configs(self) -> tuple[PatchConfig, ...]:
        """``(config,)``: the configs of the patches behind this handle (as :attr:`LayerMapHandle.configs`)."""
        return (self.config,)

    @property
    def layers(self) -> tuple[int, ...] | None:
        """The attention layers this patch applies to (indices in model order); ``None``: every layer."""
        return self.plan.layers

    @property
    def kernel(self) -> str | None:
        """The kernel that computed this patch's attention in the last layer of the last forward (a remap's ``kernel``
        option, with ``"auto"`` resolved for that input: ``"cpu_fused"``, ``"flex"`` or ``"materialised"``; under
        ``auto`` layers may differ, e.g. frozen layers without autograd beside trained ones); ``None`` before the
        first forward and for schemes that run the model's own attention."""
        return self.state.kernel_used

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
        """Take this patch off; other patches of the model (on other layers) stay in force. When the last one
        goes, the model is the stock model again, bit for bit."""
        if not self.active:
            return
        self._installation.remove([self])

    def __enter__(self) -> PatchHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.unpatch()

    def __repr__(self) -> str:
        return f"PatchHandle({type(self.model).__name__}, {self.state.describe()}, active={self.active})"


class LayerMapHandle:
    """Several patches of one model on disjoint layers as one handle: what ``hf_trajpe.patch`` returns for a
    layer map, and :func:`get_handle` for a model carrying several patches. ``handles``: one
    :class:`PatchHandle` per layer selection; ``config``: the :class:`~.layer_map.LayerMap`; ``state``: their
    states as one module (as ``model.hf_trajpe`` holds them when these are all of the model's patches)."""

    def __init__(self, handles: Sequence[PatchHandle]) -> None:
        self.handles = tuple(handles)

    @property
    def model(self) -> nn.Module:
        return self.handles[0].model

    @property
    def config(self) -> LayerMap:
        return LayerMap(tuple(h.config for h in self.handles))

    @property
    def configs(self) -> tuple[PatchConfig, ...]:
        return tuple(h.config for h in self.handles)

    @property
    def plans(self) -> tuple:
        return tuple(h.plan for h in self.handles)

    @property
    def attn_stock(self) -> str:
        """The model's own attention implementation (the one our attention functions wrap)."""
        return self.handles[0].plan.attn_stock

    @property
    def state(self) -> PatchStates:
        return PatchStates([h.state for h in self.handles])

    @property
    def kernels(self) -> tuple[str | None, ...]:
        """:attr:`PatchHandle.kernel` of each patch of the map."""
        return tuple(h.kernel for h in self.handles)

    @property
    def active(self) -> bool:
        return any(h.active for h in self.handles)

    @contextlib.contextmanager
    def texts(self, texts: Sequence[str]) -> Iterator[None]:
        """:meth:`PatchHandle.texts` for every patch of the map."""
        with contextlib.ExitStack() as stack:
            for handle in self.handles:
                stack.enter_context(handle.texts(texts))
            yield

    def set_texts(self, texts: Sequence[str] | None) -> None:
        for handle in self.handles:
            handle.set_texts(texts)

    def set_tokenizer(self, tokenizer) -> None:
        for handle in self.handles:
            handle.set_tokenizer(tokenizer)

    @property
    def clamped_tokens(self) -> int:
        return sum(h.clamped_tokens for h in self.handles)

    @property
    def monitor(self) -> TrajectoryMonitor | None:
        return self.handles[0].monitor

    def attach_monitor(self, monitor: TrajectoryMonitor | None = None) -> TrajectoryMonitor:
        """One monitor for every patch of the map (:meth:`PatchHandle.attach_monitor`)."""
        monitor = self.handles[0].attach_monitor(monitor)
        for handle in self.handles[1:]:
            handle.attach_monitor(monitor)
        return monitor

    def detach_monitor(self) -> TrajectoryMonitor | None:
        monitors = [h.detach_monitor() for h in self.handles]
        return monitors[0]

    def save(self, directory: str | os.PathLike) -> None:
        """Save the patches of the model (all of them: a model is saved whole)."""
        save_patch(self.model, directory)

    def unpatch(self) -> None:
        """Take every patch of this map off (other patches of the model stay in force)."""
        active = [h for h in self.handles if h.active]
        if active:
            active[0]._installation.remove(active)

    def describe(self) -> str:
        return "; ".join(h.state.describe() for h in self.handles)

    def __enter__(self) -> LayerMapHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.unpatch()

    def __repr__(self) -> str:
        return f"LayerMapHandle({type(self.model).__name__}, {self.describe()}, active={self.active})"
