"""Context parallelism: one long training window split over the GPUs of a group, with accelerate's
``ParallelismConfig(cp_size=...)`` (torch backend, on FSDP2; ``configs/accelerate/fsdp2_cp.yaml``).

Inside ``accelerator.maybe_context_parallel`` torch cuts each buffer along the sequence into ``2 * cp``
chunks and gives rank ``r`` chunks ``r`` and ``2 * cp - 1 - r`` (its load-balanced split: a rank's tokens are
not contiguous), and replaces ``scaled_dot_product_attention`` with a ring attention that passes keys and
values round the group. So:

- every rank must be handed the GLOBAL position ids of its tokens: the trainer builds them for the whole
  window (``arange``, or PoSE's skipped ids) and shards them with the tokens. A model as built reads them as
  ``position_ids``; a patched model, which places tokens itself, gets them through its patch state as skips
  (ids minus the shard's ranks), the mechanism PoSE uses (:func:`hf_trajpe.training.pose.skipped_positions`);
- the labels are shifted BEFORE sharding (the token after the last one of a chunk lives on another rank),
  and the loss of a shard is its summed cross-entropy over the valid tokens of the whole window, times ``cp``
  (FSDP averages the gradients over all ranks; the ``cp`` ranks of a window share one window's loss);
- attention is SDPA with the causal mask only (the ring attention takes no mask tensor);
- the ``cp`` ranks of a group train on the same rows: data are split over ``num_processes / cp`` data ranks.

What cannot work is refused before anything trains (:func:`check_context_parallel`): encodings whose position
of a token depends on the whole prefix (trajectory, CoPE), biases that need a mask, the read-time remaps,
frequencies that follow the longest position of a forward, masked LM, and a CPU launch.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch

from .pose import pose_batch, pose_generator, skipped_positions

__all__ = ["LaunchError", "ShardedWindow", "check_context_parallel", "context_parallel_size", "data_rank",
           "global_position_ids", "launched_context_parallel_size", "refuse_cpu_launch", "shifted_labels",
           "sharded_window"]

#: where ``accelerate launch`` puts the config's ``parallelism_config`` (accelerate/utils/launch.py)
PARALLELISM_ENV = "ACCELERATE_USE_PARALLELISM_CONFIG"
CP_SIZE_ENV = "PARALLELISM_CONFIG_CP_SIZE"
#: the attention implementations that run torch's scaled_dot_product_attention (stock, and ours around it)
SDPA_IMPLEMENTATIONS = ("sdpa", "hf_trajpe_sdpa")
#: rope types whose frequencies follow the largest position id of each forward (transformers' dynamic rescaling)
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")
#: what a scheme contributes -> why context parallelism cannot run it (the others: rotary, additive, nothing)
REFUSED = {
    "bias": "its bias on distances enters attention as a float mask (or an extra query/key dimension), and torch's "
            "ring attention takes no mask",
    "score": "its positions (CoPE's gates) are counted over every earlier token of the sequence inside each layer, "
             "and a rank holds only a shard of the sequence",
    "remap": "a remap (Self-Extend, ReRoPE, DCA, STRING) maps relative positions inside attention at read time and "
             "is meant to be applied without training; fine-tune rope (with its rope_parameters) and apply the "
             "remap to the tuned model afterwards",
}
TRAJECTORY = ("trajectory positions accumulate over the content (a token's position is the sum of the displacements "
              "of the tokens before it), so a rank would need the whole prefix of its shard")
IGNORE = -100


def launched_context_parallel_size(environ: Mapping[str, str] | None = None) -> int:
    """The ``cp_size`` that ``accelerate launch`` asked for (1: none), read before the accelerator exists."""
    environ = os.environ if environ is None else environ
    if environ.get(PARALLELISM_ENV, "false").lower() != "true":
        return 1
    return int(environ.get(CP_SIZE_ENV, "1"))


class LaunchError(RuntimeError):
    """A launch that cannot run as ``accelerate launch`` set it up (its config, not the experiment's): every process
    finds the same, so the recipe says it in one line and exits with status 2 instead of a traceback per process."""


def refuse_cpu_launch(cp: int, device: str) -> None:
    """Context parallelism on CPU: refused (torch's ring attention and accelerate's FSDP2 run on GPUs only)."""
    if cp > 1 and device == "cpu":
        raise LaunchError(
            f"context parallelism (cp_size={cp}) was asked for on CPU: torch's ring attention and accelerate's FSDP2 "
            "run on GPUs only. Launch on GPUs (configs/accelerate/fsdp2_cp.yaml), or on CPU without a "
            "parallelism_config (configs/accelerate/cpu.yaml, cpu_2proc.yaml)")


def context_parallel_size(accelerator) -> int:
    """``cp_size`` of the accelerator's parallelism config; 1 when context parallelism is off."""
    pc = getattr(accelerator, "parallelism_config", None)
    return int(pc.cp_size) if pc is not None and pc.cp_enabled else 1


def data_rank(accelerator) -> tuple[int, int]:
    """``(rank, world)`` over which the rows are split: the processes without context parallelism; with it,
    the groups of ``cp`` ranks (accelerate's device mesh is laid out ``dp_replicate, dp_shard, cp`` in rank
    order, so the ``cp`` ranks of a group are consecutive)."""
    cp = context_parallel_size(accelerator)
    return accelerator.process_index // cp, accelerator.num_processes // cp


def _patch_states(handle) -> list:
    return [h.state for h in getattr(handle, "handles", (handle,))]


def _rope_types(model_config) -> set[str]:
    params = getattr(model_config, "rope_parameters", None) or getattr(model_config, "rope_scaling", None) or {}
    if not isinstance(params, Mapping):
        return set()
    if "rope_type" in params or "type" in params:
        return {params.get("rope_type", params.get("type"))}
    return {p.get("rope_type", p.get("type")) for p in params.values() if isinstance(p, Mapping)}  # per layer type


def _encodings(model, handle) -> list[tuple[str, str, bool, int | None, set[str]]]:
    """``(described, scheme, trajectory, position limit, rope types)`` of each encoding the model runs."""
    from ..patching.families import adapter_for
    from ..patching.schemes import get_scheme

    if handle is not None:
        out = []
        for st in _patch_states(handle):
            plan = st.plan
            scaling = plan.rope_scaling
            if scaling is not None:
                types = {scaling.parameters["rope_type"]}
            else:  # a rotation through the model's own rotary module keeps the model's rope type
                types = _rope_types(model.config) if plan.hook == "rotary" else set()
            out.append((f"the patched encoding {st.describe()!r}", plan.scheme, bool(plan.trajectory),
                        plan.max_positions, types))
        return out
    native = adapter_for(model).native
    rows = getattr(model.config, "max_position_embeddings", None) if get_scheme(native).reads_table else None
    return [(f"the model's own {native!r} encoding", native, False, rows, _rope_types(model.config))]


def check_context_parallel(cp: int, model, handle, *, task: str, length: int, positions: int,
                           tensor_parallel: int = 1, mixed_precision: str = "bf16") -> None:
    """Refuse, before anything trains, what context parallelism cannot run (module docstring).

    ``length``: the tokens of a training window (split into ``2 * cp`` chunks); ``positions``: the largest
    position id + 1 the windows reach (``length``, or PoSE's ``target_length``); ``mixed_precision``: the
    accelerator's (``no``: attention runs in float32)."""
    from ..patching.schemes import get_scheme

    if cp <= 1:
        return
    if tensor_parallel > 1:
        raise ValueError(f"context parallelism with tensor parallelism (tp_size={tensor_parallel}) is not supported "
                         "by this trainer; set parallelism_config_tp_size: 1")
    if task != "clm":
        raise ValueError(f"context parallelism needs causal attention; model.task {task!r} attends both ways. "
                         "Train a causal LM (model.task: clm), or drop the parallelism_config")
    if length % (2 * cp):
        raise ValueError(f"context parallelism cuts each window into 2 x cp_size = {2 * cp} equal chunks; "
                         f"data.block_size {length} is not a multiple of {2 * cp}: set it to one")
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    for described, scheme, trajectory, limit, rope_types in _encodings(target, handle):
        contributes = get_scheme(scheme).contributes
        why = TRAJECTORY if trajectory else REFUSED.get(contributes)
        if why is not None:
            raise ValueError(f"context parallelism cannot train {described}: {why}. Train without the "
                             "parallelism_config (one GPU, DDP or FSDP), or choose an encoding that reads position "
                             "ids (rope, sinusoidal, learned, none)")
        dynamic = sorted(t for t in rope_types if t in DYNAMIC_ROPE_TYPES)
        if dynamic:
            raise ValueError(f"context parallelism cannot train {described} with rope_type {dynamic[0]!r}: its "
                             "frequencies follow the largest position id of each forward, which differs from shard "
                             "to shard; use a static rope_type (linear, ntk, yarn, llama3) or drop the "
                             "parallelism_config")
        if limit is not None and positions > limit:
            raise ValueError(f"the windows reach position {positions - 1}, past the {limit} positions of {described}; "
                             "lower data.block_size (or pose.target_length)")
    attn = getattr(target.config, "_attn_implementation", None)
    if attn not in SDPA_IMPLEMENTATIONS:
        raise ValueError(f"context parallelism replaces scaled_dot_product_attention with torch's ring attention; "
                         f"this model uses attention implementation {attn!r}: set model.attn_implementation: sdpa")
    heads = getattr(target.config, "num_attention_heads", None)
    kv_heads = getattr(target.config, "num_key_value_heads", None) or heads
    if mixed_precision == "no" and heads and kv_heads < heads:
        raise ValueError(f"context parallelism in float32 cannot run this model's grouped-query attention ({heads} "
                         f"query heads, {kv_heads} key/value heads): scaled_dot_product_attention takes its math "
                         "kernel there, which torch's ring attention does not shard; set train.mixed_precision: bf16")


def global_position_ids(batch: int, length: int, pose=None, *, seed: int = 0, rank: int = 0,
                        index: int = 0) -> torch.Tensor:
    """``[batch, length]`` int64 position ids of whole windows: ``arange``, or the PoSE ids of micro-batch
    ``index`` of data rank ``rank`` (``pose``: the config's ``PoseConfig``), which every rank of a context
    parallel group draws alike."""
    if pose is None:
        return torch.arange(length, dtype=torch.int64).expand(batch, length).clone()
    return pose_batch(batch, length, pose.target_length, pose.chunks, pose_generator(seed, rank, index))


def shifted_labels(labels: torch.Tensor) -> torch.Tensor:
    """``labels[:, 1:]`` with ``-100`` appended: the target of each token, placed at the token (a causal LM's
    shift, done on the whole window so that a shard holds its own targets)."""
    return torch.nn.functional.pad(labels[:, 1:], (0, 1), value=IGNORE)


@dataclass
class ShardedWindow:
    """A rank's shard of a micro-batch inside :func:`sharded_window`: ``input_ids``, ``shift_labels`` and
    ``position_ids`` (global ids) ``[b, n / cp]``, the keyword arguments of the model's forward, and the number
    of valid targets of the whole micro-batch."""

    input_ids: torch.Tensor
    shift_labels: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    cp: int
    model_kwargs: dict = field(default_factory=dict)

    def loss(self, logits: torch.Tensor) -> torch.Tensor:
        """This shard's part of the window's mean cross-entropy, times ``cp``: the ranks' gradients, averaged
        by FSDP over the group, are the window's; the losses averaged over the group are its loss."""
        flat = logits.float().reshape(-1, logits.shape[-1])
        total = torch.nn.functional.cross_entropy(flat, self.shift_labels.reshape(-1).to(flat.device),
                                                  ignore_index=IGNORE, reduction="sum")
        return total * self.cp / self.targets.to(total.device)


@contextlib.contextmanager
def sharded_window(accelerator, model, handle, input_ids: torch.Tensor, labels: torch.Tensor,
                   position_ids: torch.Tensor, cp: int) -> Iterator[ShardedWindow]:
    """Inside: this rank's shard of the micro-batch (``input_ids``, ``labels``, global ``position_ids``, all
    ``[b, n]`` on the device) under ``accelerator.maybe_context_parallel``. Run the forward AND the backward
    inside (the ring attention's backward passes gradients round the group)."""
    inputs = input_ids.clone()  # the buffers are resized in place: never the caller's (clm labels are the inputs)
    targets = shifted_labels(labels)
    positions = position_ids.to(inputs.device, torch.int64).clone()
    valid = (targets != IGNORE).sum()  # of the whole micro-batch: counted before sharding
    buffers = [inputs, targets, positions]
    with accelerator.maybe_context_parallel(buffers=buffers, buffer_seq_dims=[1, 1, 1],
                                            no_restore_buffers=set(buffers)):
        with skipped_positions(model, handle, positions) as extra:
            # an all-ones mask of the shard: transformers then leaves sdpa its causal path (no mask tensor) rather
            # than reading the shard's jumping ids as packed sequences
            kwargs = {"attention_mask": torch.ones_like(positions), **extra}
            yield ShardedWindow(inputs, targets, positions, valid, cp, kwargs)
