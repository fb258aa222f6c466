"""The Llama family: models whose rotary module and ``apply_rotary_pos_emb`` are Llama's
(half-split pairs, full head width, ``model.rotary_emb``). ``tests/patching`` checks in the installed
transformers that each registered type's rotary module is a copy of Llama's.
"""

from .adapter import FamilyAdapter

#: model_type -> attention class name; all share LlamaRotaryEmbedding's code
LLAMA_FAMILY = {
    "llama": "LlamaAttention",
    "mistral": "MistralAttention",
    "qwen2": "Qwen2Attention",
    "qwen3": "Qwen3Attention",
}

ADAPTER = FamilyAdapter(
    name="Llama family",
    model_types=tuple(LLAMA_FAMILY),
    native="rope",
    self_attention=tuple(LLAMA_FAMILY.values()),
    rotary_path="rotary_emb",
)
