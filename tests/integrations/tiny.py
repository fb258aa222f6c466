"""A tiny patched Llama on the byte tokenizer, for the lm-evaluation-harness and TRL tests.

Byte tokens make the harness's byte perplexity a token perplexity, so it compares with hf_trajpe's own
scoring one to one. ``initializer_range=0.2`` (not 0.02) makes an untrained model's predictions sharp
and context-dependent (perplexity in the thousands, not the uniform 259), so scoring the wrong tokens or
the wrong context moves the numbers far beyond the tolerances.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny_model(encoding: str = "trajectory", seed: int = 0, **options):
    import torch
    import transformers as T

    import hf_trajpe
    from hf_trajpe.data import byte_tokenizer

    tok = byte_tokenizer()
    cfg = T.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                        bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                        initializer_range=0.2)
    torch.manual_seed(seed)
    model = T.LlamaForCausalLM(cfg).eval()
    if encoding == "trajectory" and not options:
        options = {"base": "rope", "strength": 0.2}
    hf_trajpe.patch(model, encoding, **options)
    return model, tok
