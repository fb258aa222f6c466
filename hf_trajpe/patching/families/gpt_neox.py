"""GPT-NeoX: partial rotary (the first ``rotary_pct`` of each head rotates), ``gpt_neox.rotary_emb``."""

from .adapter import FamilyAdapter

ADAPTER = FamilyAdapter(
    name="GPT-NeoX",
    model_types=("gpt_neox",),
    native="rope",
    self_attention=("GPTNeoXAttention",),
    rotary_path="rotary_emb",
)
