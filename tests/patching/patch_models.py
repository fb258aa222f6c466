"""Tiny random models of every patched family (2 layers, 64 wide, vocab 128, dropout 0, float32).

A uniquely named helper module (not conftest) so test files can import it without clashing with
other conftest.py files of the repository.
"""

from __future__ import annotations

import os

import torch

from hf_trajpe.compat import cache_kwarg, output_cache

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB = 128
CAUSAL = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gpt_neox")
BIDIRECTIONAL = ("bert", "roberta")
FAMILIES = CAUSAL + BIDIRECTIONAL
#: every (encoding, options) cell of the support table
CELLS = {
    "native": ("native", {}),
    "sinusoidal": ("sinusoidal", {}),
    "rope": ("rope", {}),
    "alibi": ("alibi", {}),
    "none": ("none", {}),
    "trajectory": ("trajectory", {"strength": 0.5}),
    "trajectory/sinusoidal": ("trajectory", {"base": "sinusoidal", "strength": 0.5}),
    "trajectory/rope": ("trajectory", {"base": "rope", "strength": 0.5}),
    "trajectory/alibi": ("trajectory", {"base": "alibi", "strength": 0.5}),
}
#: learned-table families also take trajectory on their own table explicitly
LEARNED = ("gpt2", "bert", "roberta")


def cells_for(family: str) -> list[str]:
    out = list(CELLS)
    if family in LEARNED:
        out.append("trajectory/learned")
    return out


def cell(name: str) -> tuple[str, dict]:
    if name == "trajectory/learned":
        return "trajectory", {"base": "learned", "strength": 0.5}
    enc, opts = CELLS[name]
    return enc, dict(opts)


def build(family: str, attn: str = "sdpa", seed: int = 0, **overrides):
    import transformers as T

    common = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    llama_like = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, head_dim=16, **common)
    if family == "gpt2":
        cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, attn_pdrop=0.0, resid_pdrop=0.0,
                           embd_pdrop=0.0, **common)
        cls = T.GPT2LMHeadModel
    elif family in ("llama", "mistral", "qwen2", "qwen3"):
        name = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}[family]
        cfg = getattr(T, f"{name}Config")(**llama_like)
        cls = getattr(T, f"{name}ForCausalLM")
    elif family == "gpt_neox":
        cfg = T.GPTNeoXConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                              max_position_embeddings=128, rotary_pct=0.25, hidden_dropout=0.0,
                              attention_dropout=0.0, **common)
        cls = T.GPTNeoXForCausalLM
    elif family == "bert":
        cfg = T.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                           max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                           **common)
        cls = T.BertForMaskedLM
    elif family == "roberta":
        common = dict(common, pad_token_id=1, bos_token_id=0)
        cfg = T.RobertaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                              max_position_embeddings=66, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0, **common)
        cls = T.RobertaForMaskedLM
    else:
        raise ValueError(family)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    return model.eval()


def pad_id(model) -> int:
    return int(model.config.pad_token_id)


def random_ids(n: int, b: int = 1, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (b, n), generator=g)


def output(model, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        out = model(**kwargs)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def cached_logits(model, ids: torch.Tensor, mask: torch.Tensor, prefix: int = 7, cache=None,
                  return_cache: bool = False):
    """Logits of a forward over ``ids[:, :prefix]``, then one token at a time with the KV cache (what must
    equal one forward over the whole sequence). ``cache``: an empty cache object for the prefill, as
    ``generate()`` passes one (``None``: the model makes its own); ``return_cache``: also return the cache."""
    with torch.no_grad():
        out = model(input_ids=ids[:, :prefix], attention_mask=mask[:, :prefix], use_cache=True,
                    **({cache_kwarg(): cache} if cache is not None else {}))
        steps, cache = [out.logits], output_cache(out)
        for t in range(prefix, ids.shape[1]):
            out = model(input_ids=ids[:, t:t + 1], attention_mask=mask[:, :t + 1], **{cache_kwarg(): cache},
                        use_cache=True)
            steps.append(out.logits)
            cache = output_cache(out)
    logits = torch.cat(steps, dim=1)
    return (logits, cache) if return_cache else logits
