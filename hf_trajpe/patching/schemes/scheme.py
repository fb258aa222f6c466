"""The interface every positional scheme implements, and the registry the engine looks them up in.

A scheme declares what it contributes to a forward and what it can do; the engine (plan, state,
replacement modules, attention functions) only asks these questions, never a scheme's name. Adding a
scheme is one module with a subclass of :class:`Scheme` decorated with :func:`register_scheme`.

What a scheme contributes (``contributes``):

- ``"additive"``: a vector added to the token embeddings (``additive``),
- ``"rotary"``: a rotation of queries and keys (``rotary_cos_sin``),
- ``"bias"``: a bias on the attention scores from query and key positions (``attention_bias``),
- ``"score"``: an additive modification of the attention scores computed from the queries and keys
  themselves, per layer (``score_bias``; CoPE),
- ``"remap"``: the model's own rotation at positions that depend on the query-key pair, computed per
  region inside attention (the ``remap`` package: Self-Extend, ReRoPE, dual chunk attention, STRING),
- ``"nothing"``: no positional signal at all (NoPE).

A scheme declares the options it reads (``options``: a tuple of :class:`~.option.Option`, with their
checks); ``hf_trajpe.patch`` takes them as keywords where the scheme runs (as the encoding, as
trajectory's base, or as ``native`` on a model whose own scheme it is) and refuses them elsewhere.

Shape legend: ``b`` batch, ``n`` new tokens, ``t`` all key positions (cache + new), ``h`` heads,
``d`` model width, ``r`` rotary width.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from ..types import PlanView
from .option import Option, declare_options

__all__ = ["CONTRIBUTIONS", "SCHEMES", "Scheme", "register_scheme", "get_scheme", "check_interpolation",
           "table_rows_for"]

CONTRIBUTIONS = ("additive", "rotary", "bias", "score", "remap", "nothing")
#: name -> scheme class, in registration order (the order in which errors list them)
SCHEMES: dict[str, type[Scheme]] = {}


class Scheme(nn.Module):
    """One positional scheme, built for one patched model from its resolved :class:`PatchPlan`.

    Class attributes declare capabilities; the plan checks a request against them once, so the
    methods below can trust their inputs. A scheme is an ``nn.Module`` so that tables it builds move
    with the model (as non-persistent buffers) and learned parameters, if a scheme has any, are saved
    with the patch state.
    """

    name: ClassVar[str]
    contributes: ClassVar[str]
    #: can be asked for by name as an encoding (the learned table cannot be put on a model without one)
    selectable: ClassVar[bool] = True
    #: reads fractional positions, hence can be a base of trajectory
    fractional: ClassVar[bool] = False
    #: how it is read at fractional positions; the first is the default
    interpolations: ClassVar[tuple[str, ...]] = ("exact",)
    #: why another interpolation is refused (the message of the error)
    interpolation_advice: ClassVar[str] = ""
    #: works on bidirectional (encoder) models as well as causal ones
    bidirectional: ClassVar[bool] = True
    #: inside attention, needs the positions of every key (cached ones too), kept across decoding steps
    needs_key_positions: ClassVar[bool] = False
    #: attention implementations it runs on, when it enters through our attention functions
    attention_implementations: ClassVar[tuple[str, ...]] = ("eager", "sdpa", "flex_attention")
    #: reads the model's own position table, whose rows are then the position limit
    reads_table: ClassVar[bool] = False
    #: reads each forward's token ids (:meth:`read_units`: Self-Extend over units), so the model must get
    #: ``input_ids``
    reads_token_ids: ClassVar[bool] = False
    #: computes the attention of the layers it runs on itself (:meth:`attends`, :meth:`attend`), and keeps its keys
    #: in the KV cache in a form of its own (:meth:`rotate_new_keys`): the remaps
    computes_attention: ClassVar[bool] = False
    #: some model families have it as their own encoding (what ``native`` runs), so its options go with
    #: ``native`` and with trajectory on the model's own scheme (checked once the model is known)
    model_own: ClassVar[bool] = False
    #: the options it reads (``PatchConfig.options``; module docstring)
    options: ClassVar[tuple[Option, ...]] = ()

    def __init__(self, plan: PlanView) -> None:
        super().__init__()
        self.plan = plan

    # -- what a model must offer ------------------------------------------------------------------
    @classmethod
    def supported_by(cls, provides: frozenset[str]) -> bool:
        """Whether a model family offering ``provides`` (``table``, ``rotary``, ``attention``) can carry
        this scheme. Additive vectors can always be added to the input embeddings."""
        if cls.contributes == "rotary":
            return "rotary" in provides or "attention" in provides
        if cls.contributes == "remap":  # the model's own rotary, inside our attention
            return {"rotary", "attention"} <= provides
        if cls.contributes in ("bias", "score"):
            return "attention" in provides
        return True

    @classmethod
    def check_model(cls, plan: PlanView) -> None:
        """Refuse a model this scheme cannot run on (beyond ``supported_by``); default: accept."""

    @classmethod
    def check_values(cls, values: dict) -> dict:
        """Checks that involve several of its options, on all of them (each one already checked by its
        ``Option.check``); returns ``values``, normalised where needed. Default: none."""
        return values

    @classmethod
    def resolve_values(cls, values: dict, model: nn.Module) -> dict:
        """Its option values with what depends on the model settled (``sinusoid_scale="embeddings"``), at
        patch time, so a saved patch reloads with the same numbers. Default: as they are."""
        return values

    @classmethod
    def check_rope_types(cls, name: str, rope_types, rope_parameters) -> None:
        """Refuse the model's rotary types (``rope_types``: its rotary module's ``rope_type``, a dict per layer
        type in some models) with the ``rope_parameters`` given (or ``None``); ``name``: the scheme as the patch
        runs it. Default: accept."""

    @classmethod
    def check_attention_modules(cls, name: str, attention: list[nn.Module]) -> None:
        """Refuse a patch of every layer given the model's self-attention modules (a patch with ``layers`` is
        checked against its own selection instead). Default: accept."""

    # -- attention a scheme computes itself (``computes_attention``: the remaps) ---------------------
    def attends(self, module: nn.Module) -> bool:
        """Whether this scheme computes ``module``'s attention itself (:meth:`attend`); only asked where
        ``computes_attention`` is true."""
        return False

    def attend(self, st, module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
        """The attention of ``module`` for the patch state ``st``, as transformers' attention functions return
        it (``[b, n, h, d]`` and no weights)."""
        raise NotImplementedError

    def rotate_new_keys(self, st, keys: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """What the KV cache stores for this forward's new keys ``[b, g, n, d]`` of layer ``layer_idx``, for a
        scheme that computes attention itself and keeps its keys rotated (cached_keys.py)."""
        raise NotImplementedError

    def read_units(self, previous, input_ids: torch.Tensor, rank: torch.Tensor, real: torch.Tensor):
        """For a scheme that reads token ids (``reads_token_ids``): take in this forward's ``input_ids`` ``[b, n]``
        (with each token's real rank and whether it is real) after ``previous`` (what the KV cache kept, or
        ``None``), and return what the cache keeps next: an object with ``reorder(index)`` (beam search selects
        rows)."""
        raise NotImplementedError

    # -- contributions (the engine calls only the one matching ``contributes``) ---------------------
    def additive(self, positions: torch.Tensor, table: torch.Tensor | None) -> torch.Tensor:
        """Vectors ``[b, n, d]`` at ``positions`` ``[b, n]``; ``table`` is the model's own position table
        (``[rows, d]``) where it has one."""
        raise NotImplementedError

    def rotary_cos_sin(self, positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float,
                       dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``/``sin`` ``[b, n, r]`` at ``positions`` for frequencies ``inv_freq`` ``[r / 2]``."""
        raise NotImplementedError

    def attention_bias(self, num_heads: int, query_positions: torch.Tensor, key_positions: torch.Tensor,
                       dtype: torch.dtype) -> torch.Tensor:
        """Bias ``[b, h, n, t]`` added to the attention scores."""
        raise NotImplementedError

    def score_bias(self, index: int, query: torch.Tensor, key: torch.Tensor, scaling: float,
                   allowed: torch.Tensor | None) -> torch.Tensor:
        """Additive logits ``[b, h, n, t]`` of self-attention module ``index`` (in model order), from its
        ``query`` ``[b, h, n, e]`` and ``key`` ``[b, h, t, e]`` (key/value heads already repeated to the
        query heads), the module's score ``scaling``, and ``allowed`` (bool, broadcastable to
        ``[b, h, n, t]``: the keys each query may attend to, causal and padding; ``None``: all)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return self.name


def register_scheme(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make a scheme known to :func:`hf_trajpe.patch` under ``cls.name``."""
    if cls.contributes not in CONTRIBUTIONS:
        raise ValueError(f"scheme {cls.__name__} contributes {cls.contributes!r}; expected one of {CONTRIBUTIONS}")
    if cls.name in SCHEMES and SCHEMES[cls.name] is not cls:
        raise ValueError(f"a scheme named {cls.name!r} is already registered ({SCHEMES[cls.name].__name__})")
    if not cls.interpolations:
        raise ValueError(f"scheme {cls.__name__} declares no interpolation mode")
    declare_options(cls.name, cls.options)
    SCHEMES[cls.name] = cls
    return cls


def get_scheme(name: str) -> type[Scheme]:
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(f"unknown positional scheme {name!r}; known: {', '.join(SCHEMES)}") from None


def check_interpolation(scheme: str, mode: str | None) -> str:
    """The interpolation ``scheme`` is read with at fractional positions: ``mode``, or its default."""
    cls = get_scheme(scheme)
    if mode is None:
        return cls.interpolations[0]
    if mode not in cls.interpolations:
        raise ValueError(cls.interpolation_advice or
                         f"{scheme} is read at fractional positions with {', '.join(cls.interpolations)}, "
                         f"not {mode!r}")
    return mode


def table_rows_for(positions: torch.Tensor, rows: int) -> int:
    """For a table of integer positions read by interpolation, with no position limit: the rows a new
    table needs to cover ``positions`` (a power of two, at least 512), or 0 if ``rows`` already do.
    Costs one host sync; only the non-default table interpolations of analytic schemes call it."""
    needed = int(positions.detach().max()) + 3 if positions.numel() else 1  # (cubic reads two rows past)
    if needed <= rows:
        return 0
    return max(512, 1 << (needed - 1).bit_length())
