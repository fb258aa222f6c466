"""BERT and RoBERTa: learned absolute table ``embeddings.position_embeddings``, bidirectional
(causal only when configured as a decoder). RoBERTa's position 0 is row ``pad_token_id + 1``.
"""

from .adapter import FamilyAdapter


def _is_decoder(config) -> bool:
    return bool(getattr(config, "is_decoder", False))


def _roberta_offset(config) -> int:
    return int(config.pad_token_id) + 1


BERT = FamilyAdapter(
    name="BERT",
    model_types=("bert",),
    native="learned",
    self_attention=("BertSelfAttention",),
    table_path="embeddings.position_embeddings",
    token_type_ids=True,
    causal=_is_decoder,
)

ROBERTA = FamilyAdapter(
    name="RoBERTa",
    model_types=("roberta",),
    native="learned",
    self_attention=("RobertaSelfAttention",),
    table_path="embeddings.position_embeddings",
    token_type_ids=True,
    table_offset=_roberta_offset,
    causal=_is_decoder,
)
