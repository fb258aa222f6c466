"""GPT-2: learned absolute table ``wpe``, causal."""

from .adapter import FamilyAdapter

ADAPTER = FamilyAdapter(
    name="GPT-2",
    model_types=("gpt2",),
    native="learned",
    self_attention=("GPT2Attention",),
    table_path="wpe",
)
