"""A patched model keeps no autograd graph between forwards: what it stores of a forward (the positions the
handle and the monitor read) is detached when the forward ends, so ``copy.deepcopy(model)`` works after a
training step and a step's graph is freed by its backward, not by the next forward."""

from __future__ import annotations

import copy
import functools
import types

import pytest
import torch
from torch import nn

import hf_trajpe
from hf_trajpe.patching.state import PatchStates


def llama(encoding, **options):
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    hf_trajpe.patch(model, encoding, **options)
    return model.train()


def graph_tensors(root) -> list[torch.Tensor]:
    """Tensors with an autograd graph (``grad_fn``) reachable from ``root`` through attributes, containers and
    closures (not through module globals or the autograd graph itself)."""
    seen, found, todo = set(), [], [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.grad_fn is not None:
                found.append(obj)
            continue
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        elif isinstance(obj, types.FunctionType):
            todo.extend(c.cell_contents for c in (obj.__closure__ or ()) if c.cell_contents is not None)
        elif isinstance(obj, types.MethodType):
            todo.append(obj.__self__)
        elif isinstance(obj, functools.partial):
            todo.extend((obj.func, obj.args, obj.keywords))
        elif hasattr(obj, "__dict__"):
            todo.extend(vars(obj).values())
        if isinstance(obj, nn.Module):
            todo.extend(h for hooks in (obj._forward_pre_hooks, obj._forward_hooks) for h in hooks.values())
    return found


@pytest.mark.parametrize("encoding,options", [
    ("trajectory", {"base": "rope", "strength": 0.3}),
    ("trajectory", {"base": "alibi", "strength": 0.3, "learnable_strength": True}),
    ("trajectory", {"base": "rope", "strength": 0.3, "layers": "1"}),
    ({"0": {"encoding": "trajectory", "base": "rope", "strength": 0.3}, "1": "alibi"}, {}),
], ids=["rope", "alibi-learnable", "layers", "layer-map"])
def test_no_graph_is_kept_after_a_training_step_and_the_model_deep_copies(encoding, options):
    model = llama(encoding, **options)
    handle = hf_trajpe.get_handle(model)
    handle.attach_monitor()
    ids = torch.randint(3, 96, (2, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    assert graph_tensors(model) == [], "the model keeps no tensor with an autograd graph after its forward"
    model(input_ids=ids, labels=ids)  # a forward whose loss is dropped without a backward
    assert graph_tensors(model) == []
    clone = copy.deepcopy(model)
    assert hf_trajpe.get_handle(clone) is not None
    model.eval()
    clone.eval()
    with torch.no_grad():
        torch.testing.assert_close(clone(input_ids=ids).logits, model(input_ids=ids).logits)
    for state in handle.state if isinstance(handle.state, PatchStates) else [handle.state]:
        assert state.step.positions.grad_fn is None and state.step.memo == {}
        assert state.pending is None
