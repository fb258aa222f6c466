"""The checks of the coverage sweep, per (model type, encoding) cell, on a tiny model in float32.

- ``stock``: ``native`` gives the stock model's logits exactly;
- ``strength 0``: trajectory at strength 0 gives its base's logits exactly;
- ``cache``: greedy generation with the KV cache equals generation without it (causal models);
- ``padding``: a left-padded row equals the same sequence alone, on its real tokens;
- ``reload``: ``save_pretrained`` + ``hf_trajpe.from_pretrained`` give the same logits exactly;
- ``unpatch``: after ``unpatch`` the stock logits come back exactly;
- ``layers`` (the ``layer map`` cell, on models whose layers take selections): every layer through a layer
  selection with the model's own rotation (``native`` on the first, trajectory at strength 0 on the others) gives
  the stock logits exactly; the map the other checks run on is ``none`` on the first layer and ``alibi`` on the
  others.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

import torch

__all__ = ["CHECKS", "LAYER_MAP", "CellResult", "check_model_type", "cells_of"]

CHECKS = ("stock", "strength 0", "cache", "padding", "reload", "unpatch", "layers")
#: the label of the cell that patches a layer map
LAYER_MAP = "layer map"
STRENGTH = 0.3


@dataclass
class CellResult:
    """One encoding on one model type: each check passed (True), failed (False) or does not apply (None)."""

    encoding: str
    checks: dict[str, bool | None] = field(default_factory=dict)
    error: str | None = None

    @property
    def green(self) -> bool:
        return self.error is None and all(v is not False for v in self.checks.values())


#: options an encoding cannot run without, as the sweep gives them, from the model's vocabulary size: Self-Extend
#: over units needs the tokens that end a unit (every seventh id of the vocabulary here, so that a tiny model's
#: random ids hold several units)
REQUIRED_OPTIONS: dict[str, object] = {"self_extend_units": lambda vocab: {"boundary_ids": list(range(3, vocab, 7))}}


def cells_of(adapter, causal: bool = True, attention_layers: int = 2, vocab: int = 4096) -> list[tuple[str, str, dict]]:
    """``(label, encoding, options)`` for every encoding the adapter allows (causal-only schemes on causal
    models only), trajectory once per base, and a layer map where the model's layers take selections
    (``attention_layers``: how many self-attention layers it has)."""
    from ..patching.schemes import SCHEMES

    cells = [(e, e, REQUIRED_OPTIONS[e](vocab) if e in REQUIRED_OPTIONS else {}) for e in adapter.encodings
             if e != "trajectory" and (causal or e == "native" or SCHEMES[e].bidirectional)]
    if "trajectory" in adapter.encodings:
        cells += [(f"trajectory/{b}", "trajectory", {"base": b}) for b in adapter.trajectory_bases]
    if adapter.takes_layers:
        rest = "alibi" if attention_layers > 1 and "alibi" in adapter.encodings else None
        cells.append((LAYER_MAP, {"0": "none", **({"1:": rest} if rest else {})}, {}))
    return cells


def _logits(model, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(**kwargs).logits


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b)


def _check_cell(model, label: str, encoding: str, options: dict, ids, stock, causal: bool, pad: int) -> CellResult:
    from ..patching import from_pretrained, patch
    from ..patching.schemes.source import SOURCES

    result = CellResult(label)
    trajectory = isinstance(encoding, str) and encoding in SOURCES  # a source on a base: strength 0 is the base
    opts = dict(options, strength=STRENGTH) if trajectory else dict(options)
    try:
        if label == LAYER_MAP:
            zero = {"1:": {"encoding": "trajectory", "strength": 0.0}} if len(encoding) > 1 else {}
            with patch(model, {"0": "native", **zero}):
                result.checks["layers"] = _same(_logits(model, input_ids=ids), stock)
        else:
            result.checks["layers"] = None
        if trajectory:
            with patch(model, encoding, **dict(options, strength=0.0)):
                zero = _logits(model, input_ids=ids)
            base = options["base"]
            base_enc = "native" if base in ("learned",) else base
            with patch(model, base_enc):
                result.checks["strength 0"] = _same(zero, _logits(model, input_ids=ids))
        else:
            result.checks["strength 0"] = None
        handle = patch(model, encoding, **opts)
        try:
            patched = _logits(model, input_ids=ids)
            result.checks["stock"] = _same(patched, stock) if encoding == "native" else None
            if causal:
                gen = dict(max_new_tokens=4, do_sample=False, pad_token_id=pad)
                with torch.no_grad():
                    cached = model.generate(ids[:1], use_cache=True, **gen)
                    fresh = model.generate(ids[:1], use_cache=False, **gen)
                result.checks["cache"] = _same(cached, fresh)
            else:
                result.checks["cache"] = None
            padded = torch.cat([torch.full((1, 3), pad, dtype=ids.dtype), ids[1:]], dim=1)
            mask = torch.ones_like(padded)
            mask[:, :3] = 0
            alone = _logits(model, input_ids=ids[1:])
            with_pad = _logits(model, input_ids=padded, attention_mask=mask)[:, 3:]
            result.checks["padding"] = bool(torch.allclose(with_pad, alone, rtol=1e-4, atol=1e-5))
            with tempfile.TemporaryDirectory() as tmp:
                model.save_pretrained(tmp)
                reloaded = from_pretrained(tmp, dtype=torch.float32,
                                                     attn_implementation=handle.attn_stock).eval()
                result.checks["reload"] = _same(_logits(reloaded, input_ids=ids), patched)
        finally:
            handle.unpatch()
        result.checks["unpatch"] = _same(_logits(model, input_ids=ids), stock)
    except Exception as exc:  # noqa: BLE001 - the sweep records what failed and goes on
        result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return result


def check_model_type(model_type: str, task: str = "clm", attn: str = "sdpa") -> tuple[list[CellResult], str | None]:
    """Every cell of ``model_type``; the second value says why the model type was not checked at all."""
    from ..patching import adapter_for
    from .tiny import tiny_model

    try:
        model = tiny_model(model_type, task, attn)
    except Exception as exc:  # noqa: BLE001
        return [], f"does not build from a tiny config ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    try:
        adapter = adapter_for(model)
    except NotImplementedError as exc:
        return [], f"refused: {exc}"
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size if model.config.vocab_size <= 128 else 128, (2, 8), generator=g)
    pad = int(model.config.pad_token_id)
    try:
        stock = _logits(model, input_ids=ids)
    except Exception as exc:  # noqa: BLE001
        return [], f"the stock model does not run ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    causal = task == "clm" and adapter.causal(model.config)
    from ..patching.plan import self_attention_modules

    layers = len(self_attention_modules(model.base_model, adapter.self_attention))
    cells = cells_of(adapter, adapter.causal(model.config), layers, model.get_input_embeddings().num_embeddings)
    return [_check_cell(model, *cell, ids, stock, causal, pad) for cell in cells], None
