"""What a model must offer a remap, checked when patching: fixed rotary frequencies, and a rotation applied on
every layer the remap runs on. The remap computes the rotation inside attention and never runs the model's own
rotary code, so a model whose code rotates only under a condition (some layers, a flag) would get positions on
layers it leaves without them.
"""

from __future__ import annotations

import ast

from torch import nn

from ...layers import describe_layers
from ...rope_scaling import DYNAMIC_ROPE_TYPES

__all__ = ["check_attention_modules", "check_rope_types", "evaluate_condition", "rotation_condition"]


def check_rope_types(name: str, rope_types, rope_parameters) -> None:
    """Refuse a rotary module whose frequencies change with the sequence length (``rope_types``: the module's
    ``rope_type``, a dict per layer type in some models) unless a static ``rope_parameters`` replaces them: a remap
    keeps the positions inside the trained range, at fixed frequencies."""
    dynamic = sorted({t for t in (rope_types.values() if isinstance(rope_types, dict) else (rope_types,))
                      if t in DYNAMIC_ROPE_TYPES})
    if dynamic and rope_parameters is None:
        raise NotImplementedError(f"{name} remaps positions over fixed rotary frequencies; this model's rope_type "
                                  f"{dynamic[0]!r} changes them with the sequence length: give a static "
                                  "rope_parameters (for example yarn) or use another encoding")


def check_attention_modules(name: str, attention: list[nn.Module]) -> None:
    """Refuse a remap of every layer where the model's attention rotates on some layers only, by a condition in
    its own code (:func:`rotation_condition`): the remap, computed inside attention, would give the other layers
    positions. A condition true on every layer (EXAONE 4 without sliding windows) is no obstacle."""
    for cls in dict.fromkeys(type(m) for m in attention):
        condition = rotation_condition(cls)
        if condition is None:
            continue
        rotating = [evaluate_condition(condition, m) if type(m) is cls else True for m in attention]
        if all(r is True for r in rotating):
            continue
        which = ("; it rotates layers " + describe_layers([i for i, r in enumerate(rotating) if r])
                 if None not in rotating and any(rotating) else "")
        raise NotImplementedError(
            f"{cls.__name__} applies its rotation only if {ast.unparse(condition)}, a condition in its own code "
            f"that {name} (computed inside attention) does not run{which}: give layers=[...] naming the layers "
            "that rotate")


def rotation_condition(attention_class: type):
    """The condition (an ``ast`` expression) under which ``attention_class.forward`` applies its rotary (Cohere 2
    and Flint rotate their sliding-window layers only, EXAONE 4 its sliding layers, AFMoE its local ones), or
    ``None`` when it rotates unconditionally or the condition is ``self.use_rope`` (SmolLM3, Llama 4: read per
    module at run time). A remap runs inside attention and does not run the model's code for it."""
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(attention_class.forward)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        rotates = any(isinstance(call, ast.Call) and "rotary" in ast.unparse(call.func)
                      for stmt in node.body for call in ast.walk(stmt))
        if rotates and ast.unparse(node.test) != "self.use_rope":
            return node.test
    return None


def evaluate_condition(condition, module) -> bool | None:
    """``condition`` (from :func:`rotation_condition`) for one attention module, when it reads only the module's
    attributes, constants, comparisons and ``and``/``or``/``not``; ``None`` when it reads anything else (an
    argument of the forward, a call)."""

    def value(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if not hasattr(module, node.attr):
                raise LookupError(node.attr)
            return getattr(module, node.attr)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not value(node.operand)
        if isinstance(node, ast.BoolOp):
            parts = [bool(value(v)) for v in node.values]
            return all(parts) if isinstance(node.op, ast.And) else any(parts)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right, op = value(node.left), value(node.comparators[0]), node.ops[0]
            compare = {ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
                       ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}.get(type(op))
            if compare is not None:
                return compare(left, right)
        raise LookupError(ast.unparse(node))

    try:
        return bool(value(condition))
    except LookupError:
        return None
