"""The candidates of a context extension: each method's settings for a target length ``N`` from its own formula,
given the trained length ``T`` (``f = N / T``), with nothing read.

- ``yarn``: ``rope_parameters`` YaRN at factor ``f`` from ``T``.
- ``linear``: position interpolation at factor ``f``.
- ``dynamic_ntk``: transformers' dynamic NTK at factor 1: the base grows as ``n / T`` with the length ``n`` read, so
  a read of ``N`` tokens is NTK for ``f`` and a read inside ``T`` is stock (at factor ``f`` it would scale for
  ``f (f - 1) + 1`` at ``N``).
- ``ntk``: static NTK-aware at factor ``f`` (a read of ``N`` tokens equals ``dynamic_ntk``'s: not a default).
- ``self_extend``: window ``W = min(1024, T / 4)`` (the reference code's 1024 for a 4k model), and the smallest
  power-of-two group that keeps every mapped distance of ``N`` tokens under ``T`` (:func:`.settings.fit_to_length`).
- ``dca``: ChunkLlama's defaults, ``chunk_size = 3T / 4``, ``local_window = T / 8``.
- ``dca_yarn``: DCA over YaRN at factor ``f``, at DCA's defaults for the extended length ``N``.
- ``rerope``: ``window = T / 4`` (on SmolLM2's validation read, 2,048 read 14% better than the reference 512).
- ``trajectory``: content-aware compression, trajectory positions on rope with mean step ``1 / f``, strength 0.5
  (not a default).

``stock`` (the model as it is) is always a candidate too: the rule may keep it. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .settings import fit_to_length

__all__ = ["DEFAULT_METHODS", "METHODS", "STOCK", "YARN", "Candidate", "build_candidates", "check_methods"]

#: the model as it is, always read: the rule compares with it and may keep it
STOCK = "stock"
#: the frequency scaling every report shows beside the choice
YARN = "yarn"


@dataclass(frozen=True)
class Candidate:
    """One way to read ``N`` tokens: a name, the ``hf_trajpe.patch`` options (``None``: the model as it is), and
    how the settings came about."""

    name: str
    options: dict | None
    kind: str  # "stock", "scaling" (frequencies; plain transformers can save it) or "remap"/"content"
    why: str

    @property
    def encoding(self) -> str | None:
        return None if self.options is None else self.options["encoding"]

    def patch_options(self) -> tuple[str, dict]:
        """``(encoding, options)`` as ``hf_trajpe.patch(model, encoding, **options)`` takes them."""
        options = dict(self.options or {})
        return options.pop("encoding"), options

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "options": self.options, "why": self.why}


def _factor(trained: int, target: int) -> float:
    f = target / trained
    return float(round(f, 6))


def _yarn(trained: int, target: int) -> dict:
    return {"rope_type": "yarn", "factor": _factor(trained, target), "original_max_position_embeddings": trained}


def _scaling(params: Callable[[int, int], dict], why: str) -> Callable[[int, int], tuple[dict, str]]:
    return lambda t, n: ({"encoding": "rope", "rope_parameters": params(t, n)}, why)


def _self_extend(trained: int, target: int) -> tuple[dict, str]:
    window = min(1024, max(1, trained // 4))
    options = fit_to_length({"encoding": "self_extend", "group_size": 2, "window": window}, target, trained)
    return options, (f"window min(1024, T/4) = {window}; group {options['group_size']}: the smallest power of two "
                     f"that keeps every mapped distance of {target:,} tokens under {trained:,}")


def _dca(trained: int, target: int) -> tuple[dict, str]:
    return ({"encoding": "dca", "chunk_size": 3 * trained // 4, "local_window": max(0, trained // 8)},
            "ChunkLlama's defaults: chunk 3T/4, local window T/8")


def _dca_yarn(trained: int, target: int) -> tuple[dict, str]:
    return ({"encoding": "dca", "chunk_size": 3 * target // 4, "local_window": max(0, target // 8),
             "rope_parameters": _yarn(trained, target)},
            f"YaRN x{_factor(trained, target):g}, and DCA's defaults for the extended length {target:,}")


def _rerope(trained: int, target: int) -> tuple[dict, str]:
    return ({"encoding": "rerope", "window": max(1, trained // 4)}, "window T/4; no distance past it")


def _trajectory(trained: int, target: int) -> tuple[dict, str]:
    f = _factor(trained, target)
    return ({"encoding": "trajectory", "base": "rope", "strength": 0.5, "extend": f},
            f"trajectory positions on rope with mean step 1/{f:g}, strength 0.5 (the extension study's)")


#: name -> (kind, (trained, target) -> (options, why))
METHODS: dict[str, tuple[str, Callable[[int, int], tuple[dict, str]]]] = {
    "yarn": ("scaling", _scaling(_yarn, "YaRN at factor N/T")),
    "linear": ("scaling", _scaling(lambda t, n: {"rope_type": "linear", "factor": _factor(t, n)},
                                   "position interpolation at factor N/T")),
    "dynamic_ntk": ("scaling", _scaling(lambda t, n: {"rope_type": "dynamic", "factor": 1.0},
                                        "dynamic NTK at factor 1: NTK for n/T at a read of n tokens, stock inside T")),
    "ntk": ("scaling", _scaling(lambda t, n: {"rope_type": "ntk", "factor": _factor(t, n),
                                              "original_max_position_embeddings": t},
                                "static NTK-aware at factor N/T")),
    "self_extend": ("remap", _self_extend),
    "dca": ("remap", _dca),
    "dca_yarn": ("remap", _dca_yarn),
    "rerope": ("remap", _rerope),
    "trajectory": ("content", _trajectory),
}
#: what ``--methods`` defaults to (``ntk`` reads as ``dynamic_ntk`` at the target length; ``trajectory`` on request)
DEFAULT_METHODS = ("yarn", "linear", "dynamic_ntk", "self_extend", "dca", "dca_yarn", "rerope")


def check_methods(methods: Sequence[str]) -> list[str]:
    """The names in order, once each; a ``ValueError`` naming an unknown one and the known ones."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {', '.join(map(repr, unknown))}; methods: {', '.join(METHODS)}")
    return list(dict.fromkeys(methods))


def build_candidates(trained: int, target: int, methods: Sequence[str] = DEFAULT_METHODS) -> list[Candidate]:
    """``stock`` and each method's candidate for reading ``target`` tokens of a model trained on ``trained``."""
    out = [Candidate(STOCK, None, "stock", "the model as it is")]
    for name in check_methods(methods):
        kind, make = METHODS[name]
        options, why = make(trained, target)
        out.append(Candidate(name, options, kind, why))
    return out


def yarn_candidate(trained: int, target: int) -> Candidate:
    """YaRN for the target, which every report shows beside the choice (a candidate or not)."""
    kind, make = METHODS[YARN]
    options, why = make(trained, target)
    return Candidate(YARN, options, kind, why)
