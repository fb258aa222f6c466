"""Build the content-type datasets as ``datasets.DatasetDict`` objects, and save them to disk.

``build_dataset(name, train=..., validation=..., test=..., seed=0, min_chars=...)`` returns a
``DatasetDict`` with ``train``/``validation``/``test`` splits and two string columns, ``text`` and
``source`` (where the text came from: ``stdlib:<path>`` or ``generated:<type>/<format>``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from .registry import SPLITS, get
from .registry import names as registered_names

__all__ = ["DEFAULT_MIN_CHARS", "DEFAULT_SIZES", "build_all", "build_dataset", "dataset_stats",
           "load_datasets", "save_all"]

DEFAULT_SIZES: dict[str, int] = {"train": 2000, "validation": 200, "test": 200}
DEFAULT_MIN_CHARS = 768


def _features():
    import datasets

    return datasets.Features({"text": datasets.Value("string"), "source": datasets.Value("string")})


def build_dataset(name: str, train: int = DEFAULT_SIZES["train"], validation: int = DEFAULT_SIZES["validation"],
                  test: int = DEFAULT_SIZES["test"], seed: int = 0, min_chars: int = DEFAULT_MIN_CHARS,
                  progress=None):
    """One content type as a ``datasets.DatasetDict`` (splits train, validation, test).

    Deterministic given ``(seed, sizes, min_chars)``; the test split depends only on ``seed``, ``test``
    and ``min_chars``. ``progress`` is called with 1 per example made (e.g. ``tqdm.update``).
    """
    import datasets

    sizes = {"train": train, "validation": validation, "test": test}
    if any(v < 0 for v in sizes.values()):
        raise ValueError(f"split sizes must be >= 0, got {sizes}")
    if min_chars < 1:
        raise ValueError(f"min_chars must be >= 1, got {min_chars}")
    rows = get(name).make_splits(sizes, seed, min_chars, progress)
    feats = _features()
    return datasets.DatasetDict({
        split: datasets.Dataset.from_dict({"text": [r["text"] for r in rows[split]],
                                           "source": [r["source"] for r in rows[split]]}, features=feats)
        for split in ("train", "validation", "test")
    })


def build_all(names: Iterable[str] | None = None, sizes: Mapping[str, int] | None = None, seed: int = 0,
              min_chars: int = DEFAULT_MIN_CHARS, progress: bool = False) -> dict:
    """``{name: DatasetDict}`` for the given content types (default: all seven)."""
    from tqdm.auto import tqdm

    names = list(names or registered_names())
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    out = {}
    with tqdm(total=len(names) * sum(sizes.values()), desc="content types", unit="ex",
              disable=not progress) as bar:
        for name in names:
            bar.set_postfix_str(name)
            out[name] = build_dataset(name, seed=seed, min_chars=min_chars, progress=bar.update, **sizes)
    return out


def dataset_stats(dd) -> dict:
    """Examples, characters and UTF-8 bytes per split of one ``DatasetDict``."""
    out = {}
    for split in SPLITS:
        if split not in dd:
            continue
        texts = dd[split]["text"]
        out[split] = {"examples": len(texts), "chars": sum(map(len, texts)),
                      "bytes": sum(len(t.encode("utf-8")) for t in texts)}
    return out


def save_all(out_dir: str | Path, names: Iterable[str] | None = None, sizes: Mapping[str, int] | None = None,
             seed: int = 0, min_chars: int = DEFAULT_MIN_CHARS, progress: bool = True) -> dict:
    """Build and ``save_to_disk`` each type under ``out_dir/<name>``; writes ``out_dir/manifest.json``.

    Empty splits are not saved (``datasets`` cannot load them back)."""
    import datasets
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(names or registered_names())
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    manifest = {"seed": seed, "min_chars": min_chars, "sizes": sizes, "types": {}}
    with tqdm(total=len(names) * sum(sizes.values()), desc="content types", unit="ex",
              disable=not progress) as bar:
        for name in names:
            bar.set_postfix_str(name)
            t0 = time.perf_counter()
            dd = build_dataset(name, seed=seed, min_chars=min_chars, progress=bar.update, **sizes)
            seconds = time.perf_counter() - t0
            # datasets cannot load an empty split back (IndexError in load_from_disk): save non-empty ones
            datasets.DatasetDict({k: v for k, v in dd.items() if v.num_rows}).save_to_disk(str(out_dir / name))
            manifest["types"][name] = {"build_seconds": round(seconds, 3), "splits": dataset_stats(dd),
                                       "origin": get(name).origin}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def load_datasets(data_dir: str | Path, names: Iterable[str] | None = None) -> dict:
    """``{name: DatasetDict}`` from a folder written by :func:`save_all` (``hf-trajpe data build``)."""
    import datasets

    data_dir = Path(data_dir)
    names = list(names or [p.name for p in sorted(data_dir.iterdir()) if (p / "dataset_dict.json").exists()])
    missing = [n for n in names if not (data_dir / n / "dataset_dict.json").exists()]
    if missing:
        raise FileNotFoundError(f"no saved dataset for {missing} under {data_dir}")
    return {name: datasets.load_from_disk(str(data_dir / name)) for name in names}
