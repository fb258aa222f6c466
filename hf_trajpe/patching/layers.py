"""Layer selections: which attention layers a patch applies to (``hf_trajpe.patch(model, "none", layers=...)``).

A selection is given as

- a list or tuple of layer indices, or one index (negative ones count from the end, as in Python);
- a Python ``slice`` (``slice(None, None, 4)``), kept as the string ``"::4"``;
- a callable ``(index, n_layers) -> bool``, asked once per layer when patching (the chosen indices are kept);
- a string in the grammar below, also usable in YAML.

Grammar: items separated by commas, each one of

===================  ==============================================================================
``7``, ``-1``        one layer (negative: counted from the end)
``0-3``              layers 0 to 3, both included
``every:4``          every fourth layer from layer 0: 0, 4, 8, ...
``every:4:3``        every fourth layer from layer 3: 3, 7, 11, ... (SmolLM3's NoPE layers)
``top:8``            the last 8 layers; ``bottom:8``: the first 8
``2:10:2``           a Python slice ``start:stop[:step]`` (parts may be empty or negative)
``all``              every layer
===================  ==============================================================================

The items' layers are united (``"0-1,every:4"``); spaces are ignored. Layer ``i`` is the ``i``-th
self-attention module of the model in model order (the decoder layer ``layer_idx`` of decoder models).
The syntax is checked without a model (:func:`normalize_selection`); the indices are resolved against the
model's layer count when patching (:func:`resolve_selection`), where an index out of range, an empty
selection or a keyword with a bad count is refused with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

__all__ = ["LayerSpec", "describe_layers", "normalize_selection", "overlap", "resolve_selection"]

#: what ``PatchConfig.layers`` holds once normalized: a grammar string or a tuple of indices
LayerSpec = str | tuple[int, ...]

_INDEX = re.compile(r"^-?\d+$")
_RANGE = re.compile(r"^(\d+)-(\d+)$")
_SLICE = re.compile(r"^(-?\d*):(-?\d*)(?::(-?\d*))?$")
_KEYWORD = re.compile(r"^(every|top|bottom):(\d+)(?::(\d+))?$")
GRAMMAR = ("'7', '-1', '0-3', 'every:4', 'every:4:3', 'top:8', 'bottom:8', a slice '2:10:2' or 'all', "
           "joined by commas")


def _items(spec: str) -> list[str]:
    return [item for item in spec.replace(" ", "").split(",")]


def _check_item(item: str, spec: str) -> None:
    if item == "all" or _INDEX.match(item) or _RANGE.match(item) or _SLICE.match(item):
        parts = _SLICE.match(item).groups() if _SLICE.match(item) else ()
        if "-" in parts:
            raise ValueError(f"layers {spec!r}: cannot read {item!r}; a layer selection is {GRAMMAR}")
        if parts and parts[2] and int(parts[2]) == 0:
            raise ValueError(f"layers {spec!r}: the slice {item!r} has step 0; a slice start:stop:step needs a step "
                             f"other than 0 ('::2': every second layer). A layer selection is {GRAMMAR}")
        m = _RANGE.match(item)
        if m and int(m.group(1)) > int(m.group(2)):
            raise ValueError(f"layers {spec!r}: the range {item!r} ends before it starts (write low-high)")
        return
    m = _KEYWORD.match(item)
    if m:
        word, count, offset = m.group(1), int(m.group(2)), m.group(3)
        if count < 1:
            raise ValueError(f"layers {spec!r}: {word}:N needs N >= 1, got {item!r}")
        if offset is not None and word != "every":
            raise ValueError(f"layers {spec!r}: only every:N takes an offset (every:N:OFFSET), got {item!r}")
        return
    raise ValueError(f"layers {spec!r}: cannot read {item!r}; a layer selection is {GRAMMAR}")


def normalize_selection(layers) -> LayerSpec | None:
    """The form ``PatchConfig.layers`` keeps (and saves): ``None``, a checked grammar string, or a tuple of
    ints. A ``slice`` becomes its string; a callable cannot be kept (it is resolved by ``hf_trajpe.patch``,
    which has the model): passing one here raises."""
    if layers is None:
        return None
    if isinstance(layers, int) and not isinstance(layers, bool):  # one layer (YAML reads "3" as an integer)
        return (layers,)
    if isinstance(layers, slice):
        parts = [("" if p is None else str(p)) for p in (layers.start, layers.stop, layers.step)]
        if any(p is not None and (isinstance(p, bool) or not isinstance(p, int))
               for p in (layers.start, layers.stop, layers.step)):
            raise TypeError(f"a layer slice takes integers, got {layers!r}")
        layers = ":".join(parts) if parts[2] else ":".join(parts[:2])
    if isinstance(layers, str):
        spec = layers.strip()
        if not spec or not all(_items(spec)):
            raise ValueError(f"layers {layers!r}: empty item; a layer selection is {GRAMMAR}")
        for item in _items(spec):
            _check_item(item, spec)
        return ",".join(_items(spec))
    if callable(layers):
        raise TypeError("a callable layer selection is resolved against the model: pass it to hf_trajpe.patch "
                        "(layers=fn), which keeps the indices it picks")
    if isinstance(layers, Iterable) and not isinstance(layers, (bytes, dict)):
        items = tuple(layers)
        if not items or any(isinstance(i, bool) or not isinstance(i, int) for i in items):
            raise ValueError(f"layers must be a non-empty list of layer indices (integers), got {layers!r}")
        return items
    raise TypeError(f"layers must be a list of indices, a slice, a string ({GRAMMAR}) or a callable "
                    f"(index, n_layers) -> bool; got {type(layers).__name__}")


def _index(i: int, n: int, spec) -> int:
    if not -n <= i < n:
        raise ValueError(f"layers {spec!r}: layer {i} does not exist; this model has {n} layers (0 to {n - 1})")
    return i % n


def _resolve_item(item: str, n: int, spec: str) -> set[int]:
    if item == "all":
        return set(range(n))
    if _INDEX.match(item):
        return {_index(int(item), n, spec)}
    m = _RANGE.match(item)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        _index(hi, n, spec)
        return set(range(lo, hi + 1))
    m = _SLICE.match(item)
    if m:
        start, stop, step = (int(p) if p else None for p in m.groups())
        return set(range(n)[slice(start, stop, step)])
    word, count, offset = _KEYWORD.match(item).groups()
    count = int(count)
    if word == "every":
        first = int(offset or 0)
        if first >= n:
            raise ValueError(f"layers {spec!r}: every:{count}:{first} starts past the last layer ({n - 1})")
        return set(range(first, n, count))
    if count > n:
        raise ValueError(f"layers {spec!r}: {word}:{count} asks for more layers than the model has ({n})")
    return set(range(n - count, n)) if word == "top" else set(range(count))


def resolve_selection(layers, n_layers: int) -> tuple[int, ...]:
    """The sorted layer indices a selection picks out of ``n_layers`` (``layers``: anything
    :func:`normalize_selection` takes, or a callable ``(index, n_layers) -> bool``). Raises ``ValueError``
    for an index out of range or an empty result."""
    if n_layers < 1:
        raise ValueError("this model has no self-attention layers to select")
    if callable(layers) and not isinstance(layers, (str, slice)):
        picked: set[int] = set()
        for i in range(n_layers):
            chosen = layers(i, n_layers)
            if not isinstance(chosen, bool):
                raise TypeError(f"a layer selection callable must return True or False, got {chosen!r} for layer {i}")
            if chosen:
                picked.add(i)
        spec: object = getattr(layers, "__name__", "callable")
    else:
        spec = normalize_selection(layers)
        if isinstance(spec, str):
            picked = set().union(*(_resolve_item(item, n_layers, spec) for item in spec.split(",")))
        else:
            picked = {_index(i, n_layers, list(spec)) for i in spec}
    if not picked:
        raise ValueError(f"layers {spec!r} selects no layer of this model ({n_layers} layers)")
    return tuple(sorted(picked))


def overlap(a: Iterable[int], b: Iterable[int]) -> tuple[int, ...]:
    """The layers two selections share, sorted."""
    return tuple(sorted(set(a) & set(b)))


def describe_layers(indices: Iterable[int]) -> str:
    """``"3, 7"`` or ``"0-3, 8"``: indices with runs collapsed, for messages and ``describe()``."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
    return ", ".join(out)


def as_callable(fn) -> Callable[[int, int], bool] | None:
    """``fn`` when it is a selection callable (not a string, slice or sequence), else ``None``."""
    return fn if callable(fn) and not isinstance(fn, (str, slice, list, tuple)) else None
