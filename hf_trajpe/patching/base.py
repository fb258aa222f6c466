"""What every model family shares: the per-model patch state, the replacement modules, the hooks
and the attention functions registered with transformers.

How a patched forward runs (SPEC section 2; nothing fractional ever enters the model's own
``position_ids``, see docs/patching.md):

1. A forward pre-hook on the base model (``GPT2Model``, ``BertModel``, ``LlamaModel``, ...) reads
   ``input_ids``/``inputs_embeds``, ``attention_mask`` and the KV cache, computes the positions of
   the new tokens (integer ranks of real tokens, or trajectory positions continuing from the
   cache) and stores them in :class:`PatchState` for this forward.
2. The model's own position machinery reads them from there: a learned table is replaced by
   :class:`PatchedPositionTable`, a rotary module by :class:`PatchedRotary`; biases (ALiBi) and
   rotary on models without one go through an attention function registered with
   ``AttentionInterface`` (plus its mask function under the same name).
3. A forward hook stores what the next decoding step needs on the returned cache object.

Shape legend: ``b`` batch, ``n`` new tokens, ``t`` all key positions (cache + new), ``h`` heads,
``d`` width, ``r`` rotary width.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..cache import DisplacementCache, embedding_version
from ..encodings.alibi import alibi_bias, alibi_slopes
from ..encodings.interpolation import interpolate_rows
from ..encodings.rotary import apply_rotary, rotary_cos_sin, rotary_inv_freq
from ..encodings.sinusoidal import SinusoidalTable, sinusoidal_encoding
from ..encodings.trajectory import TrajectoryPast, trajectory_positions
from ..strength import AutoStrength, make_strength
from .config import PatchConfig

__all__ = ["FamilyAdapter", "PatchState", "PatchedPositionTable", "PatchedRotary", "ATTENTION_NAMES"]

_MEMORY_ATTR = "_hf_trajpe_memory"
_STATE_ATTR = "_hf_trajpe_state"
#: rotary types whose frequencies are fixed at init (dynamic ones rescale inside the stock forward)
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
#: our attention implementation name for each stock one we wrap
ATTENTION_NAMES = {"eager": "hf_trajpe_eager", "sdpa": "hf_trajpe_sdpa", "flex_attention": "hf_trajpe_flex"}


def _get_path(root: nn.Module, path: str) -> tuple[nn.Module, str, nn.Module]:
    parts = path.split(".")
    parent = root
    for p in parts[:-1]:
        parent = getattr(parent, p)
    return parent, parts[-1], getattr(parent, parts[-1])


def _bind_state(module: nn.Module, state: PatchState | None) -> None:
    """Point a module at the state without registering it as a submodule (no cycles, no keys)."""
    if state is None:
        module.__dict__.pop(_STATE_ATTR, None)
    else:
        module.__dict__[_STATE_ATTR] = state


@dataclass(frozen=True)
class FamilyAdapter:
    """How one model family exposes its positions. Paths are relative to ``model.base_model``.

    - ``native``: ``"learned"`` (absolute table at ``table_path``) or ``"rope"`` (module at ``rotary_path``).
    - ``table_offset``: first table row of position 0 (RoBERTa: ``pad_token_id + 1``).
    - ``self_attention``: class names of the self-attention modules (they get biases/rotary).
    """

    name: str
    model_types: tuple[str, ...]
    native: str
    self_attention: tuple[str, ...]
    table_path: str | None = None
    rotary_path: str | None = None
    token_type_ids: bool = False
    table_offset: Callable[[object], int] = staticmethod(lambda config: 0)
    causal: Callable[[object], bool] = staticmethod(lambda config: True)

    @property
    def encodings(self) -> tuple[str, ...]:
        return ("native", "sinusoidal", "rope", "alibi", "none", "trajectory")

    @property
    def trajectory_bases(self) -> tuple[str, ...]:
        return ("sinusoidal", "rope", "alibi") + (("learned",) if self.native == "learned" else ())

    def eager_attention(self, base: nn.Module) -> Callable:
        return importlib.import_module(type(base).__module__).eager_attention_forward


# -- replacement modules ---------------------------------------------------------------------------
class PatchedPositionTable(nn.Module):
    """Stands in for a learned position table (``nn.Embedding``). Keeps the table as ``weight`` (same
    parameter, same state-dict key) and returns the positional vectors of the current forward,
    whatever ``position_ids`` the model passes: ``[b, n, d]`` (or ``[1, 1, d]`` zeros when the
    encoding adds nothing to the embeddings).
    """

    def __init__(self, stock: nn.Embedding, state: PatchState) -> None:
        super().__init__()
        self.weight = stock.weight
        self.num_embeddings, self.embedding_dim = stock.num_embeddings, stock.embedding_dim
        self.padding_idx = stock.padding_idx
        _bind_state(self, state)

    def forward(self, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.__dict__[_STATE_ATTR].absolute_pe(self.weight)

    def extra_repr(self) -> str:
        st = self.__dict__.get(_STATE_ATTR)
        return f"{self.num_embeddings}, {self.embedding_dim}, hf_trajpe={st.describe() if st else 'detached'}"


class PatchedRotary(nn.Module):
    """Stands in for a model's rotary module: ``cos``/``sin`` ``[b, n, r]`` at the positions of the
    current forward (fractional for trajectory), or the identity rotation (``cos=1, sin=0``) when the
    encoding is not RoPE. Keeps the stock module (its non-persistent ``inv_freq``) as ``stock``.
    """

    def __init__(self, stock: nn.Module, state: PatchState) -> None:
        super().__init__()
        self.stock = stock
        _bind_state(self, state)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor | None = None):
        st: PatchState = self.__dict__[_STATE_ATTR]
        positions = st.step.positions
        inv_freq = self.stock.inv_freq
        if st.scheme != "rope":
            shape = (1, positions.shape[1], 2 * inv_freq.shape[0])
            return (torch.ones(shape, dtype=x.dtype, device=x.device),
                    torch.zeros(shape, dtype=x.dtype, device=x.device))
        return st.rope_cos_sin(positions, inv_freq, self.stock.attention_scaling, x.dtype)

    def extra_repr(self) -> str:
        st = self.__dict__.get(_STATE_ATTR)
        return f"hf_trajpe={st.describe() if st else 'detached'}"


# -- per-forward context and decoding memory ---------------------------------------------------------
@dataclass
class _Memory:
    """Stored on the KV cache object between decoding steps."""

    num_real: torch.Tensor  # [b] real tokens seen
    key_positions: torch.Tensor | None  # [b, t] positions of every cached key (biases, rotary in attention)
    trajectory: TrajectoryPast | None


class _Step:
    """Positions of one forward plus lazily built, layer-shared tensors."""

    def __init__(self, positions: torch.Tensor, key_positions: torch.Tensor | None) -> None:
        self.positions = positions  # [b, n] float32; pad tokens 0
        self.key_positions = key_positions  # [b, t] or None
        self.memo: dict = {}


class PatchState(nn.Module):
    """Everything a patched model carries: attached to the model as ``model.hf_trajpe`` so the
    learnable strength trains, moves with ``.to()`` and is saved (in its own file, see api.py).
    """

    def __init__(self, config: PatchConfig, family: FamilyAdapter, model_config, base: nn.Module) -> None:
        super().__init__()
        self.config = config
        self.family = family
        self.scheme = family.native if config.encoding == "native" else config.encoding
        self.trajectory = config.encoding == "trajectory"
        if self.trajectory:
            self.scheme = config.base or family.native
        if self.scheme == "learned" and family.native != "learned":
            raise ValueError(
                f"{family.name} models have no learned position table; trajectory bases for them: "
                f"{', '.join(family.trajectory_bases)}"
            )
        self.interp = config.interpolation or ("linear" if self.scheme == "learned" else "exact")
        if self.trajectory and self.scheme == "learned" and self.interp == "exact":
            raise ValueError("a learned table exists only at integer rows: use interpolation linear or cubic")
        if self.trajectory and self.scheme == "alibi" and self.interp != "exact":
            raise ValueError("ALiBi is linear in position, hence always exact: use interpolation 'exact'")
        self.causal = bool(family.causal(model_config))
        self.table_offset = int(family.table_offset(model_config)) if family.table_path else 0
        self.width = int(model_config.hidden_size)
        # position limit: the learned table's rows, or the configured / model's maximum
        table_rows = None
        if family.table_path:
            table_rows = _get_path(base, family.table_path)[2].num_embeddings - self.table_offset
        own_limit = table_rows if table_rows is not None else int(model_config.max_position_embeddings)
        limit = config.max_positions
        if limit is not None and self.scheme == "learned" and limit > table_rows:
            raise ValueError(
                f"max_positions={config.max_positions} exceeds the learned table ({table_rows} rows); to run "
                "longer sequences patch to 'rope', 'alibi', 'sinusoidal' or 'none' (or trajectory on those)"
            )
        self.max_positions = config.max_positions or own_limit
        # hard limit on integer positions: a learned table's rows, or what the user configured for a
        # table family (its config states the table size); rotary families keep stock behaviour
        if self.scheme == "learned":
            self.hard_limit = table_rows
        elif family.table_path or config.max_positions is not None:
            self.hard_limit = self.max_positions
        else:
            self.hard_limit = None
        if self.scheme == "sinusoidal" and self.width % 2:
            raise ValueError(f"sinusoidal encoding needs an even model width, got hidden_size={self.width}")
        self.rope_in_attention = self.scheme == "rope" and family.rotary_path is None
        self.uses_attention = self.scheme == "alibi" or self.rope_in_attention
        self.eager_fn = family.eager_attention(base) if self.uses_attention else None
        self.strength = make_strength(config.strength, config.learnable_strength) if self.trajectory else None
        self.displacement_cache = (
            DisplacementCache(config.cache_size) if (self.trajectory and config.cache) else None
        )
        self.texts: list[str] | None = None
        #: a tokenizer that turns input_ids into texts for strength="auto" (PatchHandle.set_tokenizer)
        self.tokenizer = None
        self._auto_alpha: torch.Tensor | None = None
        #: a TrajectoryMonitor (SPEC section 5) or None; set with ``PatchHandle.attach_monitor``
        self.monitor = None
        self.step: _Step | None = None
        self.pending: _Memory | None = None
        if self.scheme == "sinusoidal" and self.trajectory and self.interp != "exact":
            self.sin_table = SinusoidalTable(self.max_positions, self.width)

    def describe(self) -> str:
        if self.trajectory:
            return f"trajectory on {self.scheme} (strength={self.config.strength}, beta={self.config.beta})"
        return self.config.encoding if self.config.encoding != "native" else f"native ({self.scheme})"

    def extra_repr(self) -> str:
        return self.describe()

    @property
    def needs_key_positions(self) -> bool:
        return self.uses_attention

    # -- positions -------------------------------------------------------------------------------
    def begin_forward(
        self,
        embeddings: torch.Tensor,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        past_key_values,
        use_cache: bool,
    ) -> None:
        """Compute the positions of this forward (``embeddings``: token embeddings ``[b, n, d]``)."""
        b, n = embeddings.shape[:2]
        device = embeddings.device
        past_len = 0
        memory = None
        if past_key_values is not None and hasattr(past_key_values, "get_seq_length"):
            past_len = int(past_key_values.get_seq_length())
            if past_len:
                memory = past_key_values.__dict__.get(_MEMORY_ATTR)
                if memory is None:
                    if self.trajectory or self.needs_key_positions:
                        raise RuntimeError(
                            "this KV cache was not produced by the patched model, so hf_trajpe cannot "
                            "continue "
                            "its positions; start generation from the patched model (or pass no cache)"
                        )
                    memory = _Memory(torch.full((b,), past_len, dtype=torch.int64, device=device), None, None)
                elif memory.num_real.shape[0] != b:
                    raise RuntimeError(
                        f"the KV cache holds hf_trajpe state for batch {memory.num_real.shape[0]}, "
                        "the input has "
                        f"batch {b}; expand or select the cache rows with the model's own generate()"
                    )
        if self.hard_limit is not None and past_len + n > self.hard_limit:
            raise ValueError(
                f"sequence needs {past_len + n} positions but the position limit is {self.hard_limit} "
                f"({self.describe()}); patch with a larger max_positions (rope, alibi, sinusoidal or none "
                "can run past a learned table)"
            )
        mask = None
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise NotImplementedError(
                    "hf_trajpe patched models take a 2D attention_mask [batch, seq] (1 = real token); "
                    f"got shape {tuple(attention_mask.shape)}"
                )
            mask = attention_mask[:, -n:].to(device)
        if self.trajectory:
            positions, traj = self._trajectory_positions(embeddings, input_ids, mask, memory, use_cache)
            num_real = traj.num_real if traj is not None else None
        else:
            real = torch.ones(b, n, dtype=torch.bool, device=device) if mask is None else mask.bool()
            rank = real.to(torch.int64).cumsum(dim=1) - 1
            if memory is not None:
                rank = rank + memory.num_real.to(device)[:, None]
            positions = torch.where(real, rank, 0).to(torch.float32)
            num_real = real.sum(dim=1) + (memory.num_real.to(device) if memory is not None else 0)
            traj = None
        key_positions = None
        if self.needs_key_positions:
            key_positions = positions
            if memory is not None:
                key_positions = torch.cat((memory.key_positions, positions), dim=1)
        self.step = _Step(positions, key_positions)
        self.pending = _Memory(num_real, key_positions, traj) if use_cache else None

    def _trajectory_positions(self, embeddings, input_ids, mask, memory, use_cache):
        b = embeddings.shape[0]
        alpha = self._alpha(b, input_ids, memory)
        kwargs = dict(beta=self.config.beta, max_positions=self.max_positions, detach=self.config.detach,
                      monitor=self.monitor)
        if (
            self.displacement_cache is not None
            and memory is None
            and (not use_cache or not self.causal)  # a causal model decoding next needs the full state
            and input_ids is not None
            and not (torch.is_tensor(alpha) and alpha.requires_grad)
        ):
            weight = self._embedding_weight
            version = embedding_version(weight) if weight is not None else None
            positions = self.displacement_cache.positions(
                input_ids, embeddings, mask, alpha, version=version, **kwargs
            )
            return positions, None
        return trajectory_positions(
            embeddings, mask, alpha, past=memory.trajectory if memory is not None else None, return_past=True,
            **kwargs,
        )

    def _alpha(self, b: int, input_ids, memory) -> torch.Tensor:
        texts = self.texts
        if texts is None and self.tokenizer is not None and isinstance(self.strength, AutoStrength):
            if memory is not None and self._auto_alpha is not None and self._auto_alpha.numel() in (1, b):
                return self._auto_alpha  # a decoding step: one new token says nothing about the content
            if input_ids is not None:
                texts = self.tokenizer.batch_decode(input_ids, skip_special_tokens=True)
        alpha = self.strength(b, texts)
        if isinstance(self.strength, AutoStrength):
            self._auto_alpha = alpha
        return alpha

    _embedding_weight: torch.Tensor | None = None

    # -- what the replacement modules and attention functions read ---------------------------------
    def absolute_pe(self, table: torch.Tensor) -> torch.Tensor:
        """Additive positional vectors ``[b, n, d]`` for this forward (zeros ``[1, 1, d]`` if none)."""
        p = self.step.positions
        if self.scheme == "learned":
            rows = table[self.table_offset:] if self.table_offset else table
            if self.trajectory:
                return interpolate_rows(rows, p, self.interp)
            return rows[p.long()]
        if self.scheme == "sinusoidal":
            return self.sinusoidal(p).to(table.dtype)
        return table.new_zeros(1, 1, table.shape[1])

    def sinusoidal(self, p: torch.Tensor) -> torch.Tensor:
        if self.trajectory and self.interp != "exact":
            pe = self.sin_table(p, self.interp)
        else:
            pe = sinusoidal_encoding(p, self.width)
        scale = self.config.sinusoid_scale
        return pe if scale == 1.0 else pe * scale

    def rope_cos_sin(self, positions, inv_freq, attention_scaling, dtype):
        """RoPE ``cos``/``sin`` ``[b, n, r]``, exact or read from a table of integer positions."""
        mode = self.interp if self.trajectory else "exact"
        if mode == "exact":
            return rotary_cos_sin(positions, inv_freq=inv_freq, attention_scaling=attention_scaling,
                                  dtype=dtype)
        key = ("rope_table", inv_freq.data_ptr(), inv_freq.device)
        table = self.__dict__.get("_rope_table_cache", {}).get(key)
        if table is None:
            grid = torch.arange(self.max_positions, device=inv_freq.device, dtype=torch.float32)
            cos, sin = rotary_cos_sin(grid, inv_freq=inv_freq, attention_scaling=attention_scaling)
            table = torch.cat((cos, sin), dim=-1)
            self.__dict__["_rope_table_cache"] = {key: table}
        both = interpolate_rows(table, positions, mode)
        cos, sin = both.chunk(2, dim=-1)
        return cos.to(dtype), sin.to(dtype)

    def attention_inputs(self, query: torch.Tensor, key: torch.Tensor):
        """Rotate ``query``/``key`` (models without a rotary module) and return the ALiBi bias."""
        step = self.step
        kv = key.shape[2]
        k_pos = step.key_positions[:, -kv:]
        q_pos = step.positions
        if self.rope_in_attention:
            memo_key = ("rope", query.shape[-1], query.dtype, kv)
            if memo_key not in step.memo:
                inv = rotary_inv_freq(query.shape[-1], self.config.rope_theta, device=query.device)
                step.memo[memo_key] = (
                    self.rope_cos_sin(q_pos, inv, 1.0, query.dtype),
                    self.rope_cos_sin(k_pos, inv, 1.0, query.dtype),
                )
            (cq, sq), (ck, sk) = step.memo[memo_key]
            if kv == query.shape[2]:
                query, key = apply_rotary(query, key, cq, sq)
            else:
                query = apply_rotary(query, query, cq, sq)[0]
                key = apply_rotary(key, key, ck, sk)[0]
        bias = None
        if self.scheme == "alibi":
            memo_key = ("alibi", query.shape[1], query.dtype, kv)
            if memo_key not in step.memo:
                slopes = alibi_slopes(query.shape[1]).to(query.device)
                step.memo[memo_key] = alibi_bias(slopes, q_pos, k_pos, causal=self.causal).to(query.dtype)
            bias = step.memo[memo_key]
        return query, key, bias

    def merged_bias_mask(self, query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None,
                         is_causal: bool) -> torch.Tensor:
        """The ALiBi bias merged with the attention mask into one float mask ``[b, h, n, t]``, built once
        per forward and shared by all layers; the separate bias is then dropped. Built per layer (as
        ``position_bias``), it costs a pass over ``[b, h, n, t]`` each time and, in training, every layer
        keeps its own copy for the backward (docs/benchmarks.md)."""
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        memo = self.step.memo
        memo_key = ("alibi_mask", id(attention_mask), is_causal, query.shape[1], query.dtype, query.shape[2],
                    key.shape[2])
        hit = memo.get(memo_key)
        if hit is None or hit[0] is not attention_mask:  # the id of a freed mask can be reused
            _, _, bias = self.attention_inputs(query, key)
            hit = (attention_mask, create_position_bias_mask(bias, attention_mask, is_causal, query, key))
            memo[memo_key] = hit
            memo.pop(("alibi", query.shape[1], query.dtype, key.shape[2]), None)
        return hit[1]


# -- attention functions ---------------------------------------------------------------------------
def _eager_with_state(module, query, key, value, attention_mask, **kwargs):
    st: PatchState | None = module.__dict__.get(_STATE_ATTR)
    if st is None:
        raise RuntimeError("hf_trajpe attention called on a module it did not patch")
    query, key, bias = st.attention_inputs(query, key)
    if bias is not None:
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", False) if is_causal is None else is_causal
        is_causal = bool(is_causal) and query.shape[2] > 1
        attention_mask = create_position_bias_mask(bias, attention_mask, is_causal, query, key)
    return st.eager_fn(module, query, key, value, attention_mask, **kwargs)


def _with_position_bias(load_stock: Callable[[], Callable], merge_mask: bool = False) -> Callable:
    """An attention function that rotates q/k and passes the ALiBi bias to a stock one (sdpa, flex); modules
    we did not patch go straight to the stock function. ``merge_mask`` (sdpa): the bias goes in as a float
    attention mask shared by all layers (:meth:`PatchState.merged_bias_mask`), decided as sdpa itself would;
    otherwise as ``position_bias``, which sdpa would merge with the mask again in every layer."""

    def attention(module, query, key, value, attention_mask, **kwargs):
        stock = load_stock()
        st: PatchState | None = module.__dict__.get(_STATE_ATTR)
        if st is None:
            return stock(module, query, key, value, attention_mask, **kwargs)
        if merge_mask and st.scheme == "alibi":  # (ALiBi never rotates q/k)
            is_causal = kwargs.get("is_causal")
            is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
            q_len, kv_len = query.shape[2], key.shape[2]
            is_causal = bool(is_causal) and q_len > 1 and attention_mask is None
            if not (is_causal and kv_len > q_len):  # (else sdpa first crops the keys: leave it to sdpa)
                mask = st.merged_bias_mask(query, key, attention_mask, is_causal)
                return stock(module, query, key, value, mask, **dict(kwargs, is_causal=False))
        query, key, bias = st.attention_inputs(query, key)
        return stock(module, query, key, value, attention_mask, position_bias=bias, **kwargs)

    return attention


def _load_sdpa() -> Callable:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def _load_flex() -> Callable:
    from transformers.integrations.flex_attention import flex_attention_forward

    return flex_attention_forward


_sdpa_with_state = _with_position_bias(_load_sdpa, merge_mask=True)
_flex_with_state = _with_position_bias(_load_flex)


def _eager_passthrough(module, query, key, value, attention_mask, **kwargs):
    st: PatchState | None = module.__dict__.get(_STATE_ATTR)
    if st is not None:
        return _eager_with_state(module, query, key, value, attention_mask, **kwargs)
    fn = importlib.import_module(type(module).__module__).eager_attention_forward
    return fn(module, query, key, value, attention_mask, **kwargs)


_REGISTERED = False


def register_attention() -> None:
    """Register our attention functions and, under the same names, the stock mask functions
    (without a mask function the causal mask is silently dropped: TRAPS.md)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, flex_attention_mask, sdpa_mask

    AttentionInterface.register(ATTENTION_NAMES["eager"], _eager_passthrough)
    AttentionInterface.register(ATTENTION_NAMES["sdpa"], _sdpa_with_state)
    AttentionInterface.register(ATTENTION_NAMES["flex_attention"], _flex_with_state)
    AttentionMaskInterface.register(ATTENTION_NAMES["eager"], eager_mask)
    AttentionMaskInterface.register(ATTENTION_NAMES["sdpa"], sdpa_mask)
    AttentionMaskInterface.register(ATTENTION_NAMES["flex_attention"], flex_attention_mask)
    _REGISTERED = True


# -- hooks -----------------------------------------------------------------------------------------
def positional_parameter_names(module: nn.Module) -> list[str]:
    sig = inspect.signature(type(module).forward)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.name != "self"]


def make_pre_hook(state: PatchState, base: nn.Module, model_config) -> Callable:
    names = positional_parameter_names(base)
    accepts_token_types = "token_type_ids" in names
    embed = base.get_input_embeddings()

    def pre_hook(module, args, kwargs):
        kw = dict(zip(names, args, strict=False))
        kw.update(kwargs)
        input_ids, inputs_embeds = kw.get("input_ids"), kw.get("inputs_embeds")
        if inputs_embeds is None:
            if input_ids is None:
                return None  # let the model raise its own error
            inputs_embeds = embed(input_ids)
        use_cache = kw.get("use_cache")
        if use_cache is None:
            use_cache = bool(getattr(model_config, "use_cache", False)) and not module.training
        state.__dict__["_embedding_weight"] = getattr(embed, "weight", None)
        monitor = state.monitor
        timer = (monitor.timed(inputs_embeds.shape[0] * inputs_embeds.shape[1], inputs_embeds.device)
                 if monitor is not None else contextlib.nullcontext())
        with timer:
            state.begin_forward(inputs_embeds, input_ids, kw.get("attention_mask"), kw.get("past_key_values"),
                                bool(use_cache))
        if state.scheme == "sinusoidal" and state.family.table_path is None:
            inputs_embeds = inputs_embeds + state.sinusoidal(state.step.positions).to(inputs_embeds.dtype)
        kw["inputs_embeds"] = inputs_embeds
        kw["input_ids"] = None
        if accepts_token_types and state.family.token_type_ids and kw.get("token_type_ids") is None:
            kw["token_type_ids"] = torch.zeros(inputs_embeds.shape[:2], dtype=torch.long,
                                               device=inputs_embeds.device)
        return (), kw

    return pre_hook


def make_post_hook(state: PatchState) -> Callable:
    def post_hook(module, args, kwargs, output):
        cache = getattr(output, "past_key_values", None)
        if cache is None and isinstance(output, tuple) and len(output) > 1:
            cache = output[1] if hasattr(output[1], "get_seq_length") else None
        if cache is not None and state.pending is not None:
            cache.__dict__[_MEMORY_ATTR] = state.pending
            if "reorder_cache" not in cache.__dict__ and hasattr(type(cache), "reorder_cache"):
                cache.reorder_cache = _reordering(cache)
        return None

    return post_hook


def _reordering(cache) -> Callable:
    """Beam search reorders the cache rows; reorder our decoding memory with them."""
    stock = type(cache).reorder_cache

    def reorder_cache(beam_idx: torch.LongTensor) -> None:
        stock(cache, beam_idx)
        mem: _Memory | None = cache.__dict__.get(_MEMORY_ATTR)
        if mem is not None:
            idx = beam_idx.to(mem.num_real.device)
            cache.__dict__[_MEMORY_ATTR] = _Memory(
                mem.num_real.index_select(0, idx),
                None if mem.key_positions is None else mem.key_positions.index_select(0, idx),
                None if mem.trajectory is None else mem.trajectory.reorder(idx),
            )

    return reorder_cache


def bind_attention_modules(base: nn.Module, family: FamilyAdapter, state: PatchState | None) -> int:
    count = 0
    for m in base.modules():
        if type(m).__name__ in family.self_attention and not getattr(m, "is_cross_attention", False):
            _bind_state(m, state)
            count += 1
    return count
