"""Trajectory-guided positions: content-dependent fractional positions (docs/spec.md, section 2).

    step_i = alpha * tanh(beta * ||e_i - e_prev(i)||_2)      (prev(i): the previous real token)
    disp_i = disp_prev(i) + step_i,   p_i = clamp(rank_i + disp_i, 0, max_positions - 1)

``rank_i`` is the index of token ``i`` among the real (unpadded) tokens, so left or right padding
gives each real token the position it has alone. The positions then feed any base encoding
(sinusoidal, a learned table, RoPE, ALiBi).

Shape legend: ``b`` batch, ``n`` sequence, ``d`` embedding width.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from ..checks import check_beta, check_strength_value
from ..monitoring import TrajectoryMonitor, global_monitor

__all__ = ["TrajectoryPast", "trajectory_positions", "extend_positions", "check_strength_value", "strength_tensor"]


@dataclass
class TrajectoryPast:
    """State carried across calls during incremental (KV-cached) decoding.

    ``last_embedding``: ``[b, d]`` float32, the last real token seen; ``displacement``: ``[b]``
    accumulated displacement after it; ``num_real``: ``[b]`` int64 real tokens seen so far;
    ``extension_sum``: ``[b]`` float64, the running sum of :func:`extend_positions` (``None`` without it).
    """

    last_embedding: torch.Tensor
    displacement: torch.Tensor
    num_real: torch.Tensor
    extension_sum: torch.Tensor | None = None
    #: whether every row has seen a real token (so a decoding step has a predecessor in every row);
    #: ``None``: not known yet (the first decoding step finds out)
    all_started: bool | None = None

    def reorder(self, beam_idx: torch.Tensor) -> TrajectoryPast:
        """Select rows, as beam search reorders its cache."""
        return TrajectoryPast(
            self.last_embedding.index_select(0, beam_idx),
            self.displacement.index_select(0, beam_idx),
            self.num_real.index_select(0, beam_idx),
            None if self.extension_sum is None else self.extension_sum.index_select(0, beam_idx),
            self.all_started,
        )


_CHECKED_VERSION = "_hf_trajpe_checked_version"


def strength_tensor(strength: float | torch.Tensor, batch: int, device: torch.device) -> torch.Tensor:
    """Strength as float32 ``[b, 1]``, validated (a float, or a scalar or ``[b]`` tensor)."""
    if torch.is_tensor(strength):
        s = strength.to(device=device, dtype=torch.float32)
        if s.dim() > 1 or (s.dim() == 1 and s.shape[0] not in (1, batch)):
            raise ValueError(
                f"a strength tensor must be a scalar or have one value per sequence ([{batch}]), "
                f"got shape {tuple(strength.shape)}"
            )
        # the check costs a host sync per call; a tensor checked before and not modified since (same
        # version counter: a fixed strength is the same buffer in every forward) is not checked again
        if strength.is_inference() or getattr(strength, _CHECKED_VERSION, None) != strength._version:
            ok = (s >= 0) & (s <= 1)  # False for NaN and +-inf too
            if not bool(ok.all()):
                raise ValueError(
                    f"strength values must lie in [0, 1] (docs/spec.md, section 2.12), got {strength.tolist()}"
                )
            if not strength.is_inference():
                setattr(strength, _CHECKED_VERSION, strength._version)
        return s.reshape(-1, 1).expand(batch, 1)
    return torch.full((batch, 1), check_strength_value(strength), dtype=torch.float32, device=device)


def _accumulation_dtype(device: torch.device) -> torch.dtype:
    # float64 keeps p_i within half an ulp of float32 at 8k tokens; MPS has no float64.
    return torch.float32 if device.type == "mps" else torch.float64


def trajectory_positions(
    embeddings: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    strength: float | torch.Tensor = 0.2,
    beta: float = 2.0,
    max_positions: int | None = None,
    *,
    detach: bool = False,
    past: TrajectoryPast | None = None,
    return_past: bool = False,
    monitor: TrajectoryMonitor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, TrajectoryPast]:
    """Adapted positions ``[b, n]`` (float32) from token embeddings ``[b, n, d]``.

    - ``attention_mask`` ``[b, n]`` (1 = real token): pad tokens add no step and get position 0.
    - ``strength`` (alpha): a float in [0, 1] or a tensor, scalar or ``[b]`` (per sequence).
    - Accumulation runs in float64 (float32 on MPS) whatever the embedding dtype; a bf16 cumsum
      drifts by whole positions over long sequences.
    - A sequence whose embeddings are not finite falls back to integer positions, with one warning
      per call and a count in ``monitor`` (or in the process-wide ``global_monitor`` once enabled).
    - ``detach=True`` stops gradients into the embeddings; by default they flow through the steps.
    - ``past``/``return_past`` continue the trajectory across incremental decoding calls.
    """
    if not torch.is_tensor(embeddings) or not embeddings.is_floating_point():
        raise TypeError(
            "embeddings must be a floating-point tensor [batch, seq, dim] (token embeddings, e.g. "
            f"model.get_input_embeddings()(input_ids)), got {getattr(embeddings, 'dtype', type(embeddings))}"
        )
    if embeddings.dim() != 3:
        raise ValueError(f"embeddings must be [batch, seq, dim], got shape {tuple(embeddings.shape)}")
    b, n, _ = embeddings.shape
    device = embeddings.device
    if attention_mask is not None and tuple(attention_mask.shape) != (b, n):
        raise ValueError(
            f"attention_mask must have shape [batch, seq] = {(b, n)} to match the embeddings, "
            f"got {tuple(attention_mask.shape)}"
        )
    check_beta(beta)
    if max_positions is not None and (not isinstance(max_positions, int) or max_positions < 1):
        raise ValueError(f"max_positions must be a positive integer or None, got {max_positions!r}")
    alpha = strength_tensor(strength, b, device)
    acc = _accumulation_dtype(device)

    emb = embeddings.detach() if detach else embeddings
    if past is not None and n == 1 and monitor is None:
        return _decoding_step(emb, attention_mask, alpha, beta, max_positions, past, acc, return_past)
    real = (
        torch.ones(b, n, dtype=torch.bool, device=device)
        if attention_mask is None
        else attention_mask.to(device=device).bool()
    )
    x = emb.float()
    if past is not None:
        # the cached last real token acts as column -1
        x = torch.cat((past.last_embedding.to(device=device, dtype=torch.float32)[:, None], x), dim=1)
        has_prev = (past.num_real > 0).to(device)[:, None]
    m = x.shape[1]

    if attention_mask is None and past is None:
        # every token is real: prev(i) = i - 1
        norms = torch.linalg.vector_norm(x[:, 1:] - x[:, :-1], dim=-1)
        valid = torch.ones(b, n - 1, dtype=torch.bool, device=device)
        norms = torch.cat((norms.new_zeros(b, 1), norms), dim=1)
        valid = torch.cat((valid.new_zeros(b, 1), valid), dim=1)
    else:
        real_ext = real if past is None else torch.cat((has_prev, real), dim=1)
        idx = torch.arange(m, device=device).expand(b, m)
        last_real = torch.where(real_ext, idx, -1).cummax(dim=1).values
        prev = torch.cat((last_real.new_full((b, 1), -1), last_real[:, :-1]), dim=1)
        valid = real_ext & (prev >= 0)
        prev_x = torch.gather(x, 1, prev.clamp(min=0)[..., None].expand_as(x))
        norms = torch.linalg.vector_norm(x - prev_x, dim=-1)
        if past is not None:
            norms, valid = norms[:, 1:], valid[:, 1:]

    # non-finite steps mark a sequence as bad; masked-out (pad) tokens never count
    finite_steps = (norms < float("inf")) | ~valid  # norms are >= 0 or NaN: isfinite in one op
    n_bad = 0
    if not bool(finite_steps.all()):  # one host sync per call, needed for the warning
        # an infinite norm between finite embeddings is an overflow of float32, not bad input: a full step
        real_cols = real if past is None else torch.cat((has_prev, real), dim=1)
        row_finite = (torch.isfinite(x).all(dim=-1) | ~real_cols).all(dim=1)
        finite_steps = finite_steps | row_finite[:, None]
        n_bad = int((~finite_steps.all(dim=1)).sum())
    bad = ~finite_steps.all(dim=1)  # [b]
    steps = torch.where(valid & finite_steps, alpha * torch.tanh(beta * norms), 0.0)

    disp = steps.to(acc).cumsum(dim=1)
    rank = real.to(torch.int64).cumsum(dim=1) - 1
    if past is not None:
        disp = disp + past.displacement.to(device=device, dtype=acc)[:, None]
        rank = rank + past.num_real.to(device)[:, None]
    rank = rank.to(acc)
    positions = torch.where(bad[:, None], rank, rank + disp)
    clamped = None
    if max_positions is not None:
        clamped = (positions > max_positions - 1) & real
        positions = positions.clamp(0, max_positions - 1)
    positions = torch.where(real, positions, 0.0).to(torch.float32)

    mon = monitor if monitor is not None else global_monitor.if_enabled()
    if n_bad:
        warnings.warn(
            f"trajectory_positions: {n_bad} of {b} sequence(s) have non-finite embeddings; they fall back "
            "to standard integer positions (check the model's embeddings and inputs)",
            RuntimeWarning,
            stacklevel=2,
        )
        if mon is not None:
            mon.record_fallbacks(n_bad)
    if monitor is not None:
        disp_final = torch.where(bad[:, None], 0.0, disp)
        monitor.record_positions(positions, disp_final, real, clamped)

    if not return_past:
        return positions
    any_real = real.any(dim=1)
    if n == 1:
        last_emb = x[:, -1]
    else:
        last_idx = torch.where(real, torch.arange(n, device=device), -1).max(dim=1).values.clamp(min=0)
        # x is the float32 copy already made (shifted by one column when a past was prepended)
        last_emb = x[torch.arange(b, device=device), last_idx + (1 if past is not None else 0)]
    total_real = real.sum(dim=1)
    final_disp = torch.where(bad, 0.0, disp[:, -1]) if n else torch.zeros(b, dtype=acc, device=device)
    if past is not None:
        last_emb = torch.where(any_real[:, None], last_emb, past.last_embedding.to(device, torch.float32))
        total_real = total_real + past.num_real.to(device)
        if not n:
            final_disp = past.displacement.to(device=device, dtype=acc)
    new_past = TrajectoryPast(last_emb, final_disp, total_real)
    return positions, new_past


def _decoding_step(
    emb: torch.Tensor,
    attention_mask: torch.Tensor | None,
    alpha: torch.Tensor,
    beta: float,
    max_positions: int | None,
    past: TrajectoryPast,
    acc: torch.dtype,
    return_past: bool,
) -> torch.Tensor | tuple[torch.Tensor, TrajectoryPast]:
    """:func:`trajectory_positions` for one new token per sequence after ``past`` (a KV-cached decoding
    step): the same arithmetic in half the tensor ops of the general path, which matters once per
    generated token (docs/benchmarks.md). ``emb``: ``[b, 1, d]``; results bit-identical to the general path.
    """
    device = emb.device
    b = emb.shape[0]
    last = _on(past.last_embedding, device, torch.float32)
    num_real = _on(past.num_real, device, past.num_real.dtype)
    x = emb[:, 0].float()
    norms = torch.linalg.vector_norm(x - last, dim=-1)  # [b]; the predecessor is the cached last real token
    started = past.all_started if past.all_started is not None else bool((num_real > 0).all())
    if started:  # every row has a predecessor: if this token is real and its step finite, the plain step
        plain = torch.isfinite(norms)
        if attention_mask is not None:
            plain = plain.logical_and_(attention_mask[:, 0].to(device=device))
        if bool(plain.all()):  # (one host sync; the general path below has one too)
            return _plain_step(x, norms, alpha, beta, max_positions, past, num_real, acc, return_past)
    real = (torch.ones(b, dtype=torch.bool, device=device) if attention_mask is None
            else attention_mask[:, 0].to(device=device).bool())
    valid = real & (num_real > 0)
    ok = valid & (norms < float("inf"))  # a step exists and is finite
    bad = valid & ~ok
    n_bad = int(bad.sum())  # one host sync per call, needed for the warning
    if n_bad:  # an infinite norm between finite embeddings is a float32 overflow: a full step
        overflow = bad & torch.isfinite(x).all(dim=-1) & torch.isfinite(last).all(dim=-1)
        ok, bad = ok | overflow, bad & ~overflow
        n_bad = int(bad.sum())
    disp = past.displacement.to(device=device, dtype=acc) + torch.where(
        ok, alpha[:, 0] * torch.tanh(beta * norms), 0.0).to(acc)
    rank = (num_real + real.to(torch.int64) - 1).to(acc)
    positions = torch.where(bad, rank, rank + disp)
    if max_positions is not None:
        positions = positions.clamp(0, max_positions - 1)
    positions = torch.where(real, positions, 0.0).to(torch.float32)[:, None]
    if n_bad:
        warnings.warn(
            f"trajectory_positions: {n_bad} of {b} sequence(s) have non-finite embeddings; they fall back "
            "to standard integer positions (check the model's embeddings and inputs)",
            RuntimeWarning,
            stacklevel=3,
        )
        if global_monitor.enabled:
            global_monitor.record_fallbacks(n_bad)
    if not return_past:
        return positions
    new_past = TrajectoryPast(torch.where(real[:, None], x, last), torch.where(bad, 0.0, disp),
                              num_real + real.to(torch.int64), all_started=True if started else None)
    return positions, new_past


def _on(t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(device, dtype)`` without the call when it would return ``t`` itself (a decoding step's carried
    tensors already are where they go; each call is dispatched once per generated token)."""
    return t if t.dtype == dtype and t.device == device else t.to(device=device, dtype=dtype)


def _plain_step(x: torch.Tensor, norms: torch.Tensor, alpha: torch.Tensor, beta: float, max_positions: int | None,
                past: TrajectoryPast, num_real: torch.Tensor, acc: torch.dtype,
                return_past: bool) -> torch.Tensor | tuple[torch.Tensor, TrajectoryPast]:
    """:func:`_decoding_step` when every row is a real token after at least one real token, with a finite step
    (``generate()``'s usual step, checked by the caller): no padding to keep at 0, no fallback, so the same
    arithmetic needs about a third of the tensor ops (a decoding step pays each op once per generated
    token). Bit-identical to the general path."""
    # (the float32 step promotes to acc inside the add: exactly the converted step of the general path, one op less)
    disp = _on(past.displacement, x.device, acc) + alpha[:, 0] * torch.tanh(beta * norms)
    positions = disp + num_real  # rank + disp (the rank of a real token after num_real real ones is num_real)
    if max_positions is not None:
        positions = positions.clamp(0, max_positions - 1)
    positions = positions.to(torch.float32)[:, None]
    if not return_past:
        return positions
    return positions, TrajectoryPast(x, disp, num_real + 1, all_started=True)


def extend_positions(positions: torch.Tensor, attention_mask: torch.Tensor | None, extend: float,
                     num_real_before: torch.Tensor | None = None,
                     sum_before: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Content-aware context extension of trajectory positions ``[b, n]``: ``(positions [b, n] float32,
    running sum [b] float64)``, to continue with ``sum_before`` at the next decoding step.

    A trajectory step is ``1 + alpha * t_i`` (``t_i = tanh(beta * ||e_i - e_prev||)``). The extended step is

        q_i - q_prev = (1 + alpha * (t_i - mean(t_1 .. t_i))) / extend

    so positions advance by ``1 / extend`` on average (text ``extend`` times longer lands in the trained window,
    as in position interpolation) while each step stays larger where the content moves more. Causal: a
    position depends on its prefix only, so the KV cache and generation work as for any trajectory. With
    ``alpha = 0`` it is position interpolation, ``rank / extend``. From the trajectory positions alone:
    ``disp_i = p_i - rank_i = alpha * sum(t_1 .. t_i)``, so ``alpha * mean(t_1 .. t_i) = disp_i / rank_i`` and
    ``q_i = (p_i - sum_{j <= i, rank_j >= 1} disp_j / rank_j) / extend``; pad tokens stay at 0.
    """
    b, n = positions.shape
    device = positions.device
    real = torch.ones(b, n, dtype=torch.bool, device=device) if attention_mask is None else attention_mask.bool()
    rank = real.to(torch.int64).cumsum(dim=1) - 1
    if num_real_before is not None:
        rank = rank + num_real_before.to(device)[:, None]
    acc = _accumulation_dtype(device)
    p = positions.to(acc)
    disp = p - rank.to(acc)
    term = torch.where(real & (rank >= 1), disp / rank.clamp(min=1).to(acc), 0.0)
    running = term.cumsum(dim=1)
    if sum_before is not None:
        running = running + sum_before.to(device=device, dtype=acc)[:, None]
    out = torch.where(real, (p - running) / extend, 0.0).to(torch.float32)
    last = running[:, -1] if n else (sum_before if sum_before is not None else torch.zeros(b, dtype=acc, device=device))
    return out, last
