"""Reference forwards for every (family, encoding) cell, written from the formulas, never from hf_trajpe.

A patched model is only trustworthy if something other than its own engine says what it should output.
Here that something is the stock (unpatched) transformers model, with its positional machinery swapped
for formulas computed in float64 from the NumPy reference (``tests/reference.py``):

- additive encodings (a learned table read at given positions, the sinusoid, nothing at all) replace
  the stock position table's output, or are added to the token embeddings of a model that has no table;
- rotary and ALiBi go through an attention function registered here, which rotates queries/keys,
  adds the bias, builds the causal/padding mask itself and does the attention arithmetic in float64;
  a model's own rotary module is made the identity so that only this rotation applies.

Nothing here imports ``hf_trajpe``: what this module knows about a family (where its table or rotary
module lives, RoBERTa's row offset, causality, partial rotary) is read from transformers' models and
their configs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tests import reference as ref

__all__ = ["ATTENTION_NAME", "Stock", "STOCK", "position_limit", "rank_positions", "reference_logits",
           "trajectory_positions", "native_scheme"]

#: name of the reference attention function (and of its mask function) in transformers' registries
ATTENTION_NAME = "hf_trajpe_test_reference"


@dataclass(frozen=True)
class Stock:
    """Where a stock model keeps its positions (attribute paths from the task model)."""

    table: str | None = None  # learned absolute table (nn.Embedding)
    rotary: str | None = None  # rotary module returning (cos, sin)
    causal: bool = True
    roberta_offset: bool = False  # RoBERTa: position 0 is row pad_token_id + 1

    def table_offset(self, config) -> int:
        return int(config.pad_token_id) + 1 if self.roberta_offset else 0


STOCK = {
    "gpt2": Stock(table="transformer.wpe"),
    "bert": Stock(table="bert.embeddings.position_embeddings", causal=False),
    "roberta": Stock(table="roberta.embeddings.position_embeddings", causal=False, roberta_offset=True),
    "llama": Stock(rotary="model.rotary_emb"),
    "mistral": Stock(rotary="model.rotary_emb"),
    "qwen2": Stock(rotary="model.rotary_emb"),
    "qwen3": Stock(rotary="model.rotary_emb"),
    "gpt_neox": Stock(rotary="gpt_neox.rotary_emb"),
}


def native_scheme(family: str) -> str:
    return "learned" if STOCK[family].table else "rope"


def _path(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    *parents, name = path.split(".")
    owner = model
    for p in parents:
        owner = getattr(owner, p)
    return owner, name


def _table(model: nn.Module, family: str) -> np.ndarray:
    """The learned table's rows from position 0 on (RoBERTa's first rows are not positions)."""
    owner, name = _path(model, STOCK[family].table)
    weight = getattr(owner, name).weight.detach().double().numpy()
    return weight[STOCK[family].table_offset(model.config):]


# -- positions ------------------------------------------------------------------------------------
def _mask(ids: torch.Tensor, mask: torch.Tensor | None) -> np.ndarray:
    return np.ones(tuple(ids.shape), dtype=bool) if mask is None else mask.numpy().astype(bool)


def rank_positions(ids: torch.Tensor, mask: torch.Tensor | None = None) -> np.ndarray:
    """Each real token's index among the real tokens of its row (pads: 0), float64 ``[b, n]``."""
    real = _mask(ids, mask)
    return np.where(real, np.cumsum(real, axis=1) - 1, 0).astype(np.float64)


def position_limit(model: nn.Module, family: str, scheme: str) -> int | None:
    """How many positions the scheme can address on this model: a learned table's rows past the offset;
    no limit for the others (RoPE, ALiBi, the sinusoid and NoPE have no end)."""
    if scheme == "learned":
        return _table(model, family).shape[0]
    return None


def token_embeddings(model: nn.Module, ids: torch.Tensor) -> np.ndarray:
    """What trajectory positions are computed from: the token embedding matrix's rows (for BERT and
    RoBERTa the word embeddings alone, before token types, positions and LayerNorm)."""
    return model.get_input_embeddings().weight.detach().double().numpy()[ids.numpy()]


def trajectory_positions(model: nn.Module, family: str, ids: torch.Tensor, mask: torch.Tensor | None = None, *,
                         strength: float, beta: float = 2.0, max_positions: int | None = None,
                         scheme: str = "rope") -> np.ndarray:
    limit = position_limit(model, family, scheme) if max_positions is None else max_positions
    return ref.trajectory(token_embeddings(model, ids), _mask(ids, mask), strength=strength, beta=beta,
                          max_positions=limit)


# -- additive vectors -----------------------------------------------------------------------------
def linear_rows(rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """A table read at fractional positions: ``(1 - t) * row[floor p] + t * row[floor p + 1]``."""
    p = np.clip(positions, 0, rows.shape[0] - 1)
    lo = np.floor(p).astype(np.int64)
    hi = np.minimum(lo + 1, rows.shape[0] - 1)
    t = (p - lo)[..., None]
    return (1 - t) * rows[lo] + t * rows[hi]


def _additive(model, family, scheme, positions, sinusoid_scale) -> np.ndarray | None:
    if scheme == "learned":
        return linear_rows(_table(model, family), positions)
    if scheme == "sinusoidal":
        return sinusoid_scale * ref.sinusoidal(positions, int(model.config.hidden_size))
    return None


class _FixedVectors(nn.Module):
    """Stands in for a position table: the given vectors, whatever ``position_ids`` the model passes."""

    def __init__(self, vectors: torch.Tensor) -> None:
        super().__init__()
        self.vectors = vectors

    def forward(self, position_ids=None, *args, **kwargs) -> torch.Tensor:
        return self.vectors


class _IdentityRotary(nn.Module):
    """Stands in for a rotary module: ``cos = 1, sin = 0`` (the rotation, if any, happens in attention)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, x: torch.Tensor, position_ids=None, *args, **kwargs):
        shape = (x.shape[0], x.shape[1], self.width)
        return torch.ones(shape, dtype=x.dtype), torch.zeros(shape, dtype=x.dtype)


# -- attention ------------------------------------------------------------------------------------
@dataclass
class _Plan:
    """What the reference attention applies in the current reference forward."""

    positions: np.ndarray  # [b, n] float64
    real: np.ndarray  # [b, n] bool
    causal: bool
    rope: tuple[int, float] | None  # (rotated dims per head, theta)
    alibi: bool


_PLAN: list[_Plan] = []


def _rotate(x: torch.Tensor, positions: np.ndarray, dims: int, theta: float) -> torch.Tensor:
    """Half-split RoPE on the first ``dims`` of each head (the rest passes), per row's positions."""
    out = x.detach().double().numpy().copy()
    for b in range(out.shape[0]):
        for h in range(out.shape[1]):
            out[b, h, :, :dims] = ref.rope_rotate(out[b, h, :, :dims], positions[b], base=theta, layout="half")
    return torch.from_numpy(out)


def _reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """softmax(q k^T * scaling + ALiBi bias + mask) v in float64; the model's own mask is ignored."""
    plan = _PLAN[-1]
    b, h, n, d = query.shape
    if key.shape[2] != n:
        raise NotImplementedError("the reference attention runs whole sequences, without a KV cache")
    rep = h // key.shape[1]
    q = query.detach().double()
    k = key.detach().double().repeat_interleave(rep, dim=1)
    v = value.detach().double().repeat_interleave(rep, dim=1)
    if plan.rope is not None:
        q, k = _rotate(q, plan.positions, *plan.rope), _rotate(k, plan.positions, *plan.rope)
    scores = (q @ k.transpose(-1, -2)) * (d**-0.5 if scaling is None else scaling)
    p = torch.from_numpy(plan.positions)
    dist = p[:, :, None] - p[:, None, :]  # [b, i, j]: p_i - p_j
    if plan.alibi:
        slopes = torch.tensor(ref.alibi_slopes(h), dtype=torch.float64)
        dist_used = dist if plan.causal else dist.abs()
        scores = scores - slopes[None, :, None, None] * dist_used[:, None]
    real = torch.from_numpy(plan.real)
    allowed = real[:, None, None, :].expand(b, 1, n, n)
    if plan.causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a pad query that sees no key: zeros
    out = (probs @ v).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, _reference_attention)
    # transformers silently drops the mask for a name without a mask function; this one is ignored
    # anyway (the reference builds its own), registered so the model runs as it would with any other
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)


_register()


# -- the reference forward ------------------------------------------------------------------------
def _head_dim(config) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


@contextlib.contextmanager
def _swapped(owner: nn.Module, name: str, module: nn.Module):
    stock = getattr(owner, name)
    setattr(owner, name, module)
    try:
        yield
    finally:
        setattr(owner, name, stock)


@contextlib.contextmanager
def _attention(model: nn.Module, plan: _Plan):
    stock = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    _PLAN.append(plan)
    try:
        yield
    finally:
        _PLAN.pop()
        model.set_attn_implementation(stock)


def reference_logits(model: nn.Module, family: str, scheme: str, ids: torch.Tensor, mask: torch.Tensor | None,
                     positions: np.ndarray, *, rope_theta: float = 10000.0,
                     sinusoid_scale: float = 1.0) -> torch.Tensor:
    """Output of the stock ``model`` (unpatched) with encoding ``scheme`` at ``positions`` ``[b, n]``.

    ``scheme``: ``learned`` (the model's table, linear interpolation between rows), ``sinusoidal``
    (interleaved sin/cos times ``sinusoid_scale``), ``rope`` (the model's own rotary dims and theta,
    or all head dims at ``rope_theta`` for a model without a rotary module), ``alibi`` or ``none``.
    """
    stock = STOCK[family]
    config = model.config
    real = _mask(ids, mask)
    positions = np.asarray(positions, dtype=np.float64)
    embeds = torch.from_numpy(token_embeddings(model, ids)).float()
    added = _additive(model, family, scheme, positions, sinusoid_scale)
    added = None if added is None else torch.from_numpy(added).float()
    rope = None
    if scheme == "rope":
        if stock.rotary:
            params = config.rope_parameters
            if params.get("rope_type", "default") != "default":
                raise NotImplementedError("the reference knows the default rope type only (attention scaling 1)")
            dims = int(_head_dim(config) * params.get("partial_rotary_factor", 1.0))
            rope = (dims, float(params["rope_theta"]))
        else:
            rope = (_head_dim(config), float(rope_theta))
    plan = _Plan(positions, real, stock.causal, rope, scheme == "alibi")
    with contextlib.ExitStack() as stack:
        if stock.table:
            vectors = added if added is not None else torch.zeros(1, 1, int(config.hidden_size))
            stack.enter_context(_swapped(*_path(model, stock.table), _FixedVectors(vectors)))
        else:
            if added is not None:
                embeds = embeds + added
            stack.enter_context(_swapped(*_path(model, stock.rotary), _IdentityRotary(_head_dim(config))))
        stack.enter_context(_attention(model, plan))
        with torch.no_grad():
            out = model(inputs_embeds=embeds, attention_mask=mask)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state
