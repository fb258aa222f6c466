"""What the model benchmarks share: sizes, the two model configs, the encodings compared, patching.

Models are built from transformers configs with random weights (offline; speed and memory do not
depend on the weights) and dropout 0 (docs/notes.md, section 4: GPT-2's default dropout dominates a CPU step).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ..training.model import name_loss

__all__ = ["Size", "SIZES", "ENCODINGS", "MODELS", "Rounds", "build_model", "encodings_for", "patched",
           "parse_dtype", "random_ids", "rounds_for"]

#: every encoding compared with stock: label -> (encoding, options); strength is the default 0.2
ENCODINGS: dict[str, tuple[str, dict]] = {
    "native": ("native", {}),
    "sinusoidal": ("sinusoidal", {}),
    "rope": ("rope", {}),
    "alibi": ("alibi", {}),
    "none": ("none", {}),
    "cope": ("cope", {}),  # contextual positions (a comparator: no target, its cost beside the others)
    "trajectory/learned": ("trajectory", {"base": "learned"}),
    "trajectory/sinusoidal": ("trajectory", {"base": "sinusoidal"}),
    "trajectory/rope": ("trajectory", {"base": "rope"}),
    "trajectory/alibi": ("trajectory", {"base": "alibi"}),
    # context extensions of the rotation (docs/patching.md): static ones should cost nothing at run time;
    # dynamic recomputes its frequencies from the length at every forward
    "rope+yarn x2": ("rope", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}),
    "rope+ntk x2": ("rope", {"rope_parameters": {"rope_type": "ntk", "factor": 2.0}}),
    "rope+dynamic x2": ("rope", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}),
}
#: labels that need a model's own rotary module (a rotation inside attention has no run-time update)
NEEDS_ROTARY_MODULE = ("rope+dynamic x2",)
#: the two models: GPT-2 (learned table) and Llama (RoPE)
MODELS = ("gpt2", "llama")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Size:
    """Shapes and repeats of one benchmark size (``tiny``: the smoke test; ``default``: GPT-2 small and
    a 4-layer Llama at 512 tokens)."""

    name: str
    encoding_batch: int
    encoding_seqs: tuple[int, ...]
    encoding_dim: int
    gpt2: dict
    llama: dict
    tokens: int  # model benchmarks: batch 1 x tokens
    decode_prompt: int
    decode_new: int
    alibi_tokens: int
    remap_tokens: int  # the remap benchmark: batch 1 x tokens, past the Llama's trained length
    repeats: dict = field(default_factory=dict)  # per benchmark: paired rounds, at least
    max_rounds: dict = field(default_factory=dict)  # per benchmark: paired rounds, at most (adaptive)
    budget_s: dict = field(default_factory=dict)  # per benchmark: seconds of rounds per measured figure set
    #: per benchmark: seconds of the rounds that decide unresolved targets, per measured figure set
    decide_budget_s: dict = field(default_factory=dict)
    decide_max_rounds: dict = field(default_factory=dict)  # per benchmark: rounds at most, those included


SIZES: dict[str, Size] = {
    "tiny": Size(
        name="tiny", encoding_batch=1, encoding_seqs=(16, 64), encoding_dim=32,
        gpt2=dict(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=128),
        llama=dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=128, vocab_size=128),
        tokens=32, decode_prompt=8, decode_new=4, alibi_tokens=64, remap_tokens=160,
        repeats=dict(encoding=1, models=1, decode=1, alibi=1, remap=1),
        max_rounds=dict(encoding=1, models=1, decode=1, alibi=1, remap=1),
    ),
    "default": Size(
        name="default", encoding_batch=8, encoding_seqs=(512, 2048, 8192), encoding_dim=768,
        # GPT-2 small: 12 layers, 768 wide, 12 heads, the real vocabulary (124M parameters)
        gpt2=dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257),
        # a small Llama: 4 layers, 512 wide, 8 heads (GQA, 4 key/value heads), Llama-2 vocabulary
        llama=dict(num_hidden_layers=4, hidden_size=512, intermediate_size=1376, num_attention_heads=8,
                   num_key_value_heads=4, max_position_embeddings=4096, vocab_size=32000),
        tokens=512, decode_prompt=32, decode_new=32, alibi_tokens=4096, remap_tokens=16384,
        # at least 6 paired rounds (the fewest that give a verdict; even: both orders equally often), then
        # two at a time while an interval is wider than +-2%, up to max_rounds or budget_s seconds of rounds
        repeats=dict(encoding=10, models=6, decode=6, alibi=6, remap=6),
        max_rounds=dict(encoding=60, models=30, decode=30, alibi=16, remap=8),
        budget_s=dict(encoding=20, models=90, decode=90, alibi=90, remap=120),
        # then targets still unresolved more than 2% from their limit get pairs of rounds until decided,
        # up to these (alibi has no target)
        decide_budget_s=dict(encoding=60, models=600, decode=300),
        decide_max_rounds=dict(encoding=120, models=60, decode=60),
    ),
}


@dataclass(frozen=True)
class Rounds:
    """How a timed benchmark runs its paired rounds (timing.side_by_side): at least ``repeats``, at most
    ``max_rounds`` or ``budget_s`` seconds per figure set while an interval is wider than +-2%, then up to
    ``decide_max_rounds`` rounds or ``decide_budget_s`` seconds for targets not yet decided; timed on
    ``clock`` (timing.CLOCKS)."""

    repeats: int
    max_rounds: int
    budget_s: float | None = None
    decide_budget_s: float | None = None
    decide_max_rounds: int | None = None
    clock: str = "wall"

    def side_by_side(self) -> dict[str, object]:
        """The keyword arguments of ``side_by_side`` these rounds set."""
        return dict(repeats=self.repeats, max_rounds=self.max_rounds, budget_s=self.budget_s,
                    decide_budget_s=self.decide_budget_s, decide_max_rounds=self.decide_max_rounds)

    def describe(self) -> dict[str, object]:
        """For the result JSON."""
        return dict(repeats=self.repeats, max_rounds=self.max_rounds, budget_s=self.budget_s,
                    decide_budget_s=self.decide_budget_s, decide_max_rounds=self.decide_max_rounds, clock=self.clock)


def rounds_for(size: Size, benchmark: str, repeats: int | None = None, max_rounds: int | None = None,
               budget_s: float | None = None, decide_budget_s: float | None = None,
               decide_max_rounds: int | None = None, clock: str = "wall") -> Rounds:
    """The rounds of ``benchmark`` at ``size``; the given values override the size's."""
    repeats = repeats or size.repeats[benchmark]
    return Rounds(
        repeats=repeats,
        max_rounds=max(max_rounds or size.max_rounds.get(benchmark, repeats), repeats),
        budget_s=budget_s if budget_s is not None else size.budget_s.get(benchmark),
        decide_budget_s=decide_budget_s if decide_budget_s is not None else size.decide_budget_s.get(benchmark),
        decide_max_rounds=(decide_max_rounds if decide_max_rounds is not None
                           else size.decide_max_rounds.get(benchmark)),
        clock=clock,
    )


def parse_dtype(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(_DTYPES)}")
    return _DTYPES[name]


def build_model(family: str, size: Size, device: str = "cpu", dtype: torch.dtype = torch.float32,
                max_positions: int | None = None) -> torch.nn.Module:
    """A causal LM of ``family`` (``gpt2``/``llama``) at ``size``, random weights, sdpa, eval mode."""
    import transformers as T

    if family == "gpt2":
        kw = dict(size.gpt2, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0)
        if max_positions:
            kw["n_positions"] = max(kw["n_positions"], max_positions)
        cfg, cls = T.GPT2Config(**kw), T.GPT2LMHeadModel
    elif family == "llama":
        kw = dict(size.llama, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
        if max_positions:
            kw["max_position_embeddings"] = max(kw["max_position_embeddings"], max_positions)
        cfg, cls = T.LlamaConfig(**kw), T.LlamaForCausalLM
    else:
        raise ValueError(f"unknown benchmark model {family!r}; use one of {', '.join(MODELS)}")
    torch.manual_seed(0)
    model = cls._from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    name_loss(model)
    return model.to(device).eval()


def encodings_for(family: str) -> list[str]:
    """Labels of :data:`ENCODINGS` the family supports (Llama has no learned table, GPT-2 no rotary module)."""
    return [k for k in ENCODINGS if not (family != "gpt2" and k == "trajectory/learned")
            and not (family == "gpt2" and k in NEEDS_ROTARY_MODULE)]


def patched(model: torch.nn.Module) -> Callable[[str | None], contextlib.AbstractContextManager]:
    """``context(None)``: the stock model; ``context(label)``: patched with that encoding, unpatched after."""

    @contextlib.contextmanager
    def context(label: str | None) -> Iterator[None]:
        if label is None:
            yield
            return
        from ..patching import patch

        enc, opts = ENCODINGS[label]
        with patch(model, enc, **opts):
            yield

    return context


def random_ids(vocab: int, n: int, batch: int = 1, device: str = "cpu", seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (batch, n), generator=g).to(device)
