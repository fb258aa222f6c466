"""Long-context evaluation: perplexity against position on long real text, and passkey retrieval.

What a context extension is for: reading past the trained length ``T``. Two measures:

- **Perplexity by window.** Long documents of the machine's real text (``hf_trajpe.data.real_text``'s test
  files, read whole: standard-library source, licences, manual pages), the first ``length`` tokens of each;
  the per-token loss is pooled in windows of position relative to ``T`` (inside it, 1-1.5x, 1.5-2x, 2-3x,
  ...), per kind of text, with a 95% bootstrap interval over documents (a document is the unit that varies).
  The loss is computed from the last hidden states through the output embeddings a chunk of positions at a
  time, so a 12k-token window of a 49k vocabulary never holds its 2.4 GB of logits at once.
- **Passkey retrieval.** A five-digit key hidden at a depth (fraction of the filler before it) in repeated
  filler text, then "What is the pass key? The pass key is"; greedy decoding; right when the first five
  digits generated are the key (the prompt of the landmark-attention and YaRN papers).

Both are registered metrics (``perplexity_by_window``, ``passkey_retrieval``: :mod:`hf_trajpe.evaluation.metrics`);
this module makes their inputs (documents, losses, prompts, answers) and the intervals.

Shape legend: ``n`` tokens of one document.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .metrics import get_metric
from .metrics.perplexity_by_window import WINDOW_EDGES

__all__ = ["WINDOW_EDGES", "LONG_KINDS", "Window", "long_documents", "token_nll", "perplexity_by_window",
           "span_perplexity", "passkey_prompt", "passkey_retrieval", "PasskeyResult"]

#: kinds of real text with documents long enough to read past a trained length
LONG_KINDS = ("stdlib", "license", "man")


def long_documents(tokenizer, kind: str, min_tokens: int, count: int, split: str = "test",
                   files: Sequence[tuple] | None = None) -> list[dict]:
    """Up to ``count`` documents of ``kind`` (``real_text`` kinds) of at least ``min_tokens`` tokens, read whole
    from the files of ``split`` (the split a file's path decides), in the split's fixed order; each
    ``{"source", "ids"}`` (``ids``: ``[n]`` int64, first ``min_tokens`` tokens). ``files``: the kind's
    ``(key, path)`` listing in that order, where the caller keeps it (listing the standard library is slow)."""
    from ..data.real_text import KINDS, _order, split_of

    if kind not in KINDS:
        raise ValueError(f"unknown kind of real text {kind!r}; kinds: {', '.join(KINDS)}")
    listing, text_of = KINDS[kind]
    if files is None:
        files = sorted(listing(), key=lambda kp: _order(kp[0]))
    out = []
    for key, path in files:
        if len(out) >= count:
            break
        if split_of(key) != split:
            continue
        text = text_of(path).strip()
        if len(text) < min_tokens:  # fewer characters than tokens needed: too short whatever the tokenizer
            continue
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        if ids.numel() >= min_tokens:
            out.append({"source": f"{kind}:{key}", "ids": ids[:min_tokens].clone()})
    return out


def _head(model) -> tuple[torch.nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings: long-context perplexity needs a causal LM")
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        return head, lambda h: torch.tanh(head(h) / cap) * cap
    return head, head


@torch.inference_mode()
def token_nll(model, ids: torch.Tensor, chunk: int = 1024, prefill_chunk: int | None = None) -> torch.Tensor:
    """Loss of each next token of one document ``ids`` ``[n]``: ``[n - 1]`` float64 (position ``i`` predicts
    token ``i + 1``), the output head applied ``chunk`` positions at a time.

    ``prefill_chunk``: read the document that many tokens at a time through the KV cache (chunked prefill), so
    that no forward holds more than ``prefill_chunk`` queries' activations and attention scores; ``None``: one
    forward. Both give the same losses up to float rounding (the same keys, attended in another grouping)."""
    _, head = _head(model)
    device = next(model.parameters()).device
    ids = ids.to(device)[None]
    n = ids.shape[1]
    step = n if prefill_chunk is None else max(1, int(prefill_chunk))
    cache = None
    if step < n:
        from transformers import DynamicCache

        from ..compat import cache_kwarg

        cache, cache_name = DynamicCache(config=model.config), cache_kwarg()
    out = []
    for begin in range(0, n - 1, step):
        end = min(begin + step, n)
        kwargs = {cache_name: cache, "use_cache": True} if cache is not None else {"use_cache": False}
        hidden = model.base_model(input_ids=ids[:, begin:end], attention_mask=torch.ones_like(ids[:, :end]),
                                  position_ids=torch.arange(begin, end, device=device)[None], **kwargs)
        hidden = hidden.last_hidden_state if hasattr(hidden, "last_hidden_state") else hidden[0]
        last = min(end, n - 1)  # the document's last token predicts nothing
        for start in range(begin, last, chunk):
            stop = min(start + chunk, last)
            logits = head(hidden[:, start - begin:stop - begin]).float()
            target = ids[:, start + 1:stop + 1]
            out.append(torch.nn.functional.cross_entropy(logits[0], target[0], reduction="none").double().cpu())
    return torch.cat(out)


@dataclass
class Window:
    """One window of positions ``[start, stop)`` (tokens; ``low``/``high`` in trained lengths)."""

    low: float
    high: float
    start: int
    stop: int
    ppl: float
    ci: tuple[float, float]
    tokens: int
    documents: int

    @property
    def label(self) -> str:
        return f"{self.low:g}-{self.high:g}x"


def perplexity_by_window(nlls: Sequence[torch.Tensor], trained: int, edges: Sequence[float] = WINDOW_EDGES,
                         n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> list[Window]:
    """Pool per-token losses (``token_nll`` of each document; position ``i`` is the token at ``i + 1``) in
    windows of position (the metric ``perplexity_by_window``), with a percentile bootstrap interval over
    documents."""
    pooled = get_metric("perplexity_by_window")(nlls, trained, edges)
    perplexity = get_metric("perplexity")
    rng = np.random.default_rng(seed)
    out = []
    for w in pooled:
        picks = rng.integers(0, len(nlls), size=(n_resamples, len(nlls)))
        boot = perplexity(w.sums[picks].sum(axis=1), w.counts[picks].sum(axis=1))
        tail = (1 - level) / 2
        ci = (float(np.quantile(boot, tail)), float(np.quantile(boot, 1 - tail)))
        out.append(Window(w.low, w.high, w.start, w.stop, w.ppl, ci, int(w.counts.sum()), len(nlls)))
    return out


FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
         "I will quiz you about the important information there.\n\n")
QUESTION = "\nWhat is the pass key? The pass key is"


def span_perplexity(windows: Sequence[dict], low: float, high: float | None = None) -> float | None:
    """Perplexity of the tokens from ``low`` to ``high`` trained lengths (``None``: to the end of the last
    window), pooled from a report's windows (``{"low", "high", "ppl"}``) by their share of the tokens; ``None``
    when the windows do not tile that span exactly."""
    inside = [w for w in windows if w["low"] >= low and (high is None or w["high"] <= high)]
    if not inside:
        return None
    end = max(w["high"] for w in inside) if high is None else high
    if abs(sum(w["high"] - w["low"] for w in inside) - (end - low)) > 1e-9:
        return None
    return math.exp(sum((w["high"] - w["low"]) * math.log(w["ppl"]) for w in inside) / (end - low))


def passkey_prompt(tokenizer, length: int, depth: float, key: str) -> torch.Tensor:
    """``[n]`` ids of a passkey prompt of about ``length`` tokens (at most), the key after ``depth`` of the filler."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "

    def encode(repeats: int) -> torch.Tensor:
        before = int(round(repeats * depth))
        text = INTRO + FILLER * before + needle + FILLER * (repeats - before) + QUESTION
        return tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]

    low, high = 0, 1
    while encode(high).numel() <= length:
        low, high = high, high * 2
    while high - low > 1:  # the most repeats that fit
        mid = (low + high) // 2
        low, high = (mid, high) if encode(mid).numel() <= length else (low, mid)
    return encode(low)


@dataclass
class PasskeyResult:
    length: int
    depth: float
    tokens: int
    right: int
    trials: int
    answers: list[str] = field(default_factory=list)


@torch.inference_mode()
def passkey_retrieval(model, tokenizer, lengths: Iterable[int], depths: Iterable[float], trials: int = 1,
                      seed: int = 0, progress: Callable[[str], None] | None = None) -> list[PasskeyResult]:
    """Greedy passkey retrieval at each (length, depth), ``trials`` keys each (keys drawn from ``seed``)."""
    rng = np.random.default_rng(seed)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = []
    for length in lengths:
        for depth in depths:
            result = PasskeyResult(length, float(depth), 0, 0, trials)
            keys = []
            for _ in range(trials):
                key = str(int(rng.integers(10000, 100000)))
                ids = passkey_prompt(tokenizer, length, depth, key).to(device)[None]
                result.tokens = int(ids.shape[1])
                gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                                     pad_token_id=pad)
                answer = tokenizer.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
                keys.append(key)
                result.answers.append(answer.strip())
                if progress is not None:
                    progress(f"passkey {length} tokens, depth {depth:g}: {answer.strip()!r} (key {key})")
            hits, _ = get_metric("passkey_retrieval").per_example(result.answers, keys)
            result.right = int(hits.sum())
            out.append(result)
    return out
