"""Activation checkpointing (``model.gradient_checkpointing_enable()``, TRL's default) on a patched model.

A checkpointed layer runs twice: in the forward, and again in the backward to rebuild what it did not keep.
The layers of a patched model read the positions of their forward from the patch's state (``state.step``), and
build some tensors once per forward for all layers (``Step.memo``). Three things make the second run equal the
first:

- the replay of a layer reads the step of the forward it belongs to, whatever forward ran since
  (:class:`CheckpointSwitch` wraps each layer's checkpoint function for the duration of a forward);
- what a layer builds for all layers is not part of that layer's checkpoint (:meth:`~.state.Step.sharing`
  keeps the tensors its autograd graph saves, as without checkpointing), so the replay of the layer that built
  it, which finds it built, saves as many tensors as its forward did;
- positions that carry gradients (trajectory positions come from the token embeddings and the strength) enter
  the layers other than through their positional arguments, and reentrant checkpointing
  (``use_reentrant=True``) gives no gradient to such tensors: it runs the layer's forward without autograd
  and its backward outside the model's graph. Layers are then checkpointed non-reentrantly, which gives the
  same gradients as no checkpointing (the layer's outputs are the same either way).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import nn

__all__ = ["CheckpointSwitch"]

ATTRIBUTE = "_gradient_checkpointing_func"


def _carries_gradients(step) -> bool:
    return step is not None and any(
        t is not None and t.requires_grad for t in (step.positions, step.key_positions))


def _reentrant(function: Callable) -> bool:
    """Whether a checkpoint function set by transformers (``functools.partial(checkpoint, **kwargs)``) checkpoints
    reentrantly (torch's default when ``use_reentrant`` is not given)."""
    return isinstance(function, functools.partial) and function.keywords.get("use_reentrant") in (True, None)


class CheckpointSwitch:
    """The checkpointed modules of one patched model (those with a ``gradient_checkpointing`` flag, as
    transformers' decoder layers), switched for one forward at a time: :meth:`begin` after the states computed
    their steps, :meth:`end` when the forward is over (also when it raised)."""

    def __init__(self, runner: nn.Module, states: Sequence) -> None:
        self.states = list(states)
        self.modules = [m for m in runner.modules() if hasattr(m, "gradient_checkpointing")]
        self.switched: list[tuple[nn.Module, bool, Callable]] = []

    def begin(self) -> None:
        if not torch.is_grad_enabled() or torch.compiler.is_compiling():
            return
        active = [m for m in self.modules
                  if m.gradient_checkpointing and m.training and callable(getattr(m, ATTRIBUTE, None))]
        if not active:
            return
        steps = [st.step for st in self.states]
        for step in steps:
            step.checkpointed = True
        force = any(_carries_gradients(step) for step in steps)
        for module in active:
            stock = module.__dict__.get(ATTRIBUTE, None)
            own = ATTRIBUTE in module.__dict__
            function = getattr(module, ATTRIBUTE)
            module.__dict__[ATTRIBUTE] = self._wrap(function, steps, force and _reentrant(function))
            self.switched.append((module, own, stock))

    def end(self) -> None:
        while self.switched:
            module, own, stock = self.switched.pop()
            if own:
                module.__dict__[ATTRIBUTE] = stock
            else:
                module.__dict__.pop(ATTRIBUTE, None)

    def _wrap(self, function: Callable, steps: list, non_reentrant: bool) -> Callable:
        states = self.states

        def checkpointed(layer_forward: Callable, *args, **kwargs):
            def replay(*a, **k):
                held = [st.step for st in states]
                for st, step in zip(states, steps, strict=True):
                    st.step = step
                try:
                    return layer_forward(*a, **k)
                finally:
                    for st, step in zip(states, held, strict=True):
                        st.step = step

            if non_reentrant:
                kwargs["use_reentrant"] = False
            return function(replay, *args, **kwargs)

        return checkpointed
