"""Content-type datasets (docs/spec.md, section 3) and tokenization helpers.

Seven types, registered by name in :data:`CONTENT_TYPE_REGISTRY` (one module each). See
``docs/data.md`` for how each is made, with examples.

    >>> from hf_trajpe.data import build_dataset
    >>> dd = build_dataset("dialogue_structure", train=100, validation=10, test=10, seed=0)

Importing this package imports no heavy library; ``datasets`` is imported when a dataset is built.
"""

from . import (  # noqa: F401  (register)
    circular,
    code,
    convergent,
    dialogue,
    divergent,
    linear,
    random_content,
    real_text,  # noqa: F401  (registers real_text, used only where named)
)
from .build import (
    DEFAULT_MIN_CHARS,
    DEFAULT_SIZES,
    build_all,
    build_dataset,
    dataset_stats,
    load_datasets,
    save_all,
)
from .registry import CONTENT_TYPE_REGISTRY, SPLITS, ContentType, register
from .tokenization import byte_tokenizer, load_tokenizer, minilm_tokenizer, pack_blocks, pack_token_stream

__all__ = [
    "CONTENT_TYPE_REGISTRY",
    "DEFAULT_MIN_CHARS",
    "DEFAULT_SIZES",
    "SPLITS",
    "ContentType",
    "build_all",
    "build_dataset",
    "byte_tokenizer",
    "dataset_stats",
    "load_datasets",
    "load_tokenizer",
    "minilm_tokenizer",
    "pack_blocks",
    "pack_token_stream",
    "register",
    "save_all",
]
