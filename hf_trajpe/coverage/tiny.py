"""Tiny random models of any causal-LM or masked-LM model type in the installed transformers."""

from __future__ import annotations

import torch

__all__ = ["model_types", "tiny_model"]

#: config attributes set when a config has them (names vary across model types)
TINY = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
    vocab_size=128, max_position_embeddings=128, head_dim=16, n_layer=2, n_head=4, n_embd=64, d_model=64,
    n_positions=128, ffn_dim=128, num_layers=2, n_inner=128, moe_intermediate_size=64, num_experts=4,
    num_local_experts=4, num_experts_per_tok=2, shared_expert_intermediate_size=64, word_embed_proj_dim=64,
    embedding_size=64, dim=64, n_heads=4, n_layers=2, hidden_dim=128, kv_lora_rank=16, q_lora_rank=16,
    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, global_attn_every_n_layers=1,
)
#: per model type, what the shared values above get wrong (GPT-J's default rotary_dim, 64, exceeds a 16-wide head:
#: 8 rotates half of each head, as its checkpoints rotate a part)
PER_TYPE = {"gptj": dict(rotary_dim=8)}
#: a tiny model is well under this; a config that does not shrink is skipped, not built
MAX_PARAMETERS = 20_000_000
#: dropouts set to 0 so that a forward is deterministic in train mode too
DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "attn_pdrop", "resid_pdrop", "embd_pdrop",
            "attention_dropout", "hidden_dropout", "dropout", "embedding_dropout", "mlp_dropout")


def model_types() -> list[tuple[str, str]]:
    """``(task, model_type)`` for every causal-LM (``clm``) and masked-LM (``mlm``) model type."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    return [("clm", t) for t in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)] + [
        ("mlm", t) for t in sorted(MODEL_FOR_MASKED_LM_MAPPING_NAMES)]


def _tiny_config(model_type: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cfg = CONFIG_MAPPING[model_type]()
    for key, value in TINY.items():
        if hasattr(cfg, key) or key in getattr(cfg, "attribute_map", {}):
            try:
                setattr(cfg, key, value)
            except Exception:  # noqa: BLE001 - a derived or per-layer attribute: keep the default
                pass
    for key, value in PER_TYPE.get(model_type, {}).items():
        setattr(cfg, key, value)
    for key in DROPOUTS:
        if isinstance(getattr(cfg, key, None), float):
            setattr(cfg, key, 0.0)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value >= TINY["vocab_size"]:
            setattr(cfg, key, 1)
    if getattr(cfg, "pad_token_id", None) is None:
        cfg.pad_token_id = 0
    types = getattr(cfg, "layer_types", None)
    if isinstance(types, list) and len(types) > TINY["num_hidden_layers"]:
        cfg.layer_types = types[: TINY["num_hidden_layers"]]
    return cfg


def tiny_model(model_type: str, task: str = "clm", attn: str = "sdpa", seed: int = 0):
    """A tiny float32 model of ``model_type`` with its causal-LM or masked-LM head, in eval mode."""
    import transformers
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    names = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if task == "clm" else MODEL_FOR_MASKED_LM_MAPPING_NAMES
    name = names[model_type]
    cls = getattr(transformers, name[0] if isinstance(name, (tuple, list)) else name)
    cfg = _tiny_config(model_type)
    with torch.device("meta"):  # count first: some configs do not shrink and would take many GB
        size = sum(p.numel() for p in cls._from_config(_tiny_config(model_type)).parameters())
    if size > MAX_PARAMETERS:
        raise ValueError(f"its config does not shrink to a tiny model ({size / 1e6:.0f}M parameters)")
    torch.manual_seed(seed)
    try:
        return cls._from_config(cfg, attn_implementation=attn, dtype=torch.float32).eval()
    except ValueError as exc:  # a model type without sdpa: its eager attention, as users would load it
        if attn != "sdpa" or "does not support an attention implementation" not in str(exc):
            raise
        torch.manual_seed(seed)
        return cls._from_config(_tiny_config(model_type), attn_implementation="eager", dtype=torch.float32).eval()
