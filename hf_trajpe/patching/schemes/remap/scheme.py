"""The interface of the training-free long-context methods that remap relative positions (Self-Extend,
ReRoPE, dual chunk attention, STRING) over a model's own rotary, and what they share.

Such a method keeps the model's RoPE frequencies (or those of ``rope_parameters``) but gives a query-key
pair ``(i, j)`` another relative distance than ``i - j``. Every one of them splits the pairs into a few
*regions* (a neighbour window and the rest; the chunks of DCA), and within a region the distance is
``f_q(i) - f_k(j)``: the query rotated at one position, the key at another. A scheme declares the regions
(:meth:`RemapScheme.regions`: per region the positions at which queries and keys are rotated) and which
region each pair falls in (:meth:`RemapScheme.region_index`); the attention (attention.py, through a kernel of
``kernels/``) computes the scores of each region and takes, per pair, the score of its region before one softmax.

The model's own rotation is switched off (its rotary module gives the identity rotation), so attention sees
unrotated queries and keys. A key's positions follow from its own position alone, so the KV cache stores each
key rotated once per key rotation (keys.py) and a decoding step rotates its query only.
``i`` and ``j`` are the ranks of the real tokens (from the attention mask, continuing after the KV cache), so a
left-padded row equals the sequence alone.

Every remap takes ``rope_parameters`` (the rotation it runs over, extended as for ``rope``), ``kernel`` (which
kernel computes its attention: ``kernels/``; not saved, as transformers does not save ``attn_implementation``),
and its own options.
Options that depend on the model (DCA's chunk size, STRING's shift: fractions of the trained length) default
to ``None`` and are filled in by ``resolve_values`` when patching, so a saved patch holds the numbers it ran
with. The trained length is that of the rotation: the extended length of ``rope_parameters`` when given, else
the model's ``original_max_position_embeddings`` or ``max_position_embeddings`` (:func:`rotation_length`).
Self-Extend and ReRoPE share ``window``, DCA and STRING ``local_window`` (one declaration each, whose default
``None`` stands for each scheme's own).

Shape legend: ``b`` batch, ``n`` queries, ``t`` keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn

from ...rope_scaling import extended_length, trained_length
from ..option import Option
from ..rope import ROPE_PARAMETERS
from ..scheme import Scheme
from .attention import remap_attention
from .checks import check_attention_modules, check_rope_types
from .kernels import AUTO, KERNEL_NAMES
from .keys import rotate_new_keys

__all__ = ["KERNEL", "LOCAL_WINDOW", "RemapScheme", "WINDOW", "integer", "rotation_length"]


def integer(name: str, minimum: int = 1, what: str = "", optional: bool = False) -> Callable[[object], int | None]:
    """The check of an integer option ``>= minimum`` (``None`` too where ``optional``); its ``ValueError`` names
    the option (``name``: ``"group_size (self_extend)"``) and what it takes (``what``)."""

    def check(value: object) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}{what}, got {value!r}")
        return value

    return check


#: the nearest distances kept exact: Self-Extend's neighbour window, ReRoPE's window
WINDOW = Option(
    "window", None, "integer >= 1, or None",
    "the nearest distances, kept exact (Self-Extend's neighbour window, ReRoPE's window); None: the reference "
    "code's, 1024 for self_extend, 512 for rerope",
    integer("window", what=" (the nearest distances, kept exact)", optional=True))
#: DCA's and STRING's share of the nearest positions
LOCAL_WINDOW = Option(
    "local_window", None, "integer >= 0, or None",
    "dca: the queries of a chunk that keep their true distance to the previous chunk (None: an eighth of the "
    "trained length); string: the nearest distances kept for neighbours (None: min(128, shift // 2))",
    integer("local_window", minimum=0, what=" (the nearest positions kept for neighbours)", optional=True))


def _kernel(value: object) -> str:
    choices = (AUTO, *KERNEL_NAMES)
    if value not in choices:
        raise ValueError(f"kernel (remaps) must be one of {', '.join(map(repr, choices))} (auto: the first of the "
                         f"kernel list that can run each input), got {value!r}")
    return value


#: which kernel computes a remap's attention (kernels/)
KERNEL = Option(
    "kernel", AUTO, "'auto', " + ", ".join(f"'{k}'" for k in KERNEL_NAMES),
    "the remaps: which kernel computes the attention; auto: the first of cpu_fused (CPU, no autograd), flex "
    "(CUDA), materialised (everything) that can run each input; one named is refused, with the reason, where it "
    "cannot", _kernel, saved="no")


def rotation_length(values: dict, model) -> int | None:
    """The length the rotation under a remap was trained for: that of the extension ``rope_parameters`` (in
    ``values``, resolved when patching), else the model's trained length; ``None`` when its config has none."""
    given = values.get("rope_parameters")
    return trained_length(model.config) if given is None else extended_length(given, model.config)


class RemapScheme(Scheme):
    """A rotary scheme whose relative distances depend on the query-key pair (module docstring)."""

    contributes = "remap"
    bidirectional = False
    #: the options every remap takes (each scheme adds its own before them)
    options: ClassVar[tuple[Option, ...]] = (ROPE_PARAMETERS, KERNEL)
    #: ``window``'s value when the patch leaves it out, for a remap that takes the shared ``WINDOW`` option
    default_window: ClassVar[int | None] = None
    needs_key_positions = True
    computes_attention = True
    attention_implementations = ("eager", "sdpa")
    attention_refusals: ClassVar[dict[str, str]] = {
        "flex_attention": "its scores come from several rotations of each query and key, selected per pair, which "
                          "a flex score_mod (one score from one rotated q and k) cannot compute; load the model with "
                          "sdpa and patch with kernel='flex' for FlexAttention per region",
    }

    def __init__(self, plan) -> None:
        super().__init__(plan)
        #: the ``kernel`` option (kernels/)
        self.kernel: str = plan.config.options.get("kernel", AUTO)

    @classmethod
    def check_values(cls, values: dict) -> dict:
        """The shared ``window`` option has no default of its own (each remap's differs): fill in this one's."""
        if cls.default_window is not None and values.get("window") is None:
            values = {**values, "window": cls.default_window}
        return values

    @classmethod
    def check_model(cls, plan) -> None:
        scaling = plan.rope_scaling
        if scaling is not None and scaling.dynamic:
            raise NotImplementedError(
                f"{cls.name} remaps positions over fixed rotary frequencies; rope_type "
                f"{scaling.parameters['rope_type']!r} changes them with the sequence length: use a static type "
                "(yarn, linear, llama3, ntk)")

    def regions(self, query_positions: torch.Tensor,
                key_positions: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """Per region, in the numbering of :meth:`region_index`: the positions ``[b, n]`` at which each query
        is rotated and ``[b, t]`` at which each key is rotated, from the real positions ``[b, n]`` and
        ``[b, t]`` (float32 ranks). Regions may return the same key tensor (rotated once). A key's positions
        must follow from its own position alone, elementwise (not from the queries, nor from the other keys):
        the KV cache keeps each key rotated as it enters (keys.py)."""
        raise NotImplementedError

    def query_rotations(self, query_positions: torch.Tensor) -> tuple[list[torch.Tensor], list[int]]:
        """Per region, the positions ``[b, n]`` at which the queries are rotated and the index of the region's
        key rotation in :meth:`key_rotations`."""
        regions = self.regions(query_positions, query_positions[:, :0])
        return [q for q, _ in regions], _key_indices(regions)

    def key_rotations(self, key_positions: torch.Tensor) -> list[torch.Tensor]:
        """The distinct positions ``[b, t]`` at which keys are rotated (one per key tensor of :meth:`regions`):
        read without queries, as the KV cache computes them for each new key."""
        regions = self.regions(key_positions[:, :0], key_positions)
        distinct: dict[int, torch.Tensor] = {}
        for _, keys in regions:
            distinct.setdefault(id(keys), keys)
        return list(distinct.values())

    def region_index(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """The region of each pair, an integer tensor ``[b, n, t]``, from ``[b, n, 1]`` and ``[b, 1, t]``
        (float32 ranks). Pairs with ``j > i`` are masked anyway: any region. For a given key it must not
        decrease with the query position (farther pairs fall in later regions): the attention reads the regions
        a block of queries meets from its smallest and largest position (kernels/cpu_fused.py); FlexAttention
        calls it elementwise, on scalar positions (kernels/flex.py)."""
        raise NotImplementedError

    def score_scale(self, key_positions: torch.Tensor) -> torch.Tensor | None:
        """A factor per row ``[b]`` on every score of a forward whose keys are at ``key_positions`` ``[b, t]`` (a
        temperature: DCA's ``log_scale``), or ``None`` for none."""
        return None

    @classmethod
    def check_rope_types(cls, name: str, rope_types, rope_parameters) -> None:
        check_rope_types(name, rope_types, rope_parameters)

    @classmethod
    def check_attention_modules(cls, name: str, attention: list[nn.Module]) -> None:
        check_attention_modules(name, attention)

    def attends(self, module: nn.Module) -> bool:
        """A layer that rotates (SmolLM3's NoPE layers, ``use_rope`` false, stay without positions)."""
        return bool(getattr(module, "use_rope", True))

    def attend(self, st, module, query, key, value, attention_mask, **kwargs):
        return remap_attention(st, module, query, key, value, attention_mask, **kwargs)

    def rotate_new_keys(self, st, keys: torch.Tensor, layer_idx: int) -> torch.Tensor:
        return rotate_new_keys(st, keys, layer_idx)


def _key_indices(regions) -> list[int]:
    """Per region, the index of its key tensor among the distinct ones, in order of first use."""
    seen: dict[int, int] = {}
    return [seen.setdefault(id(keys), len(seen)) for _, keys in regions]
