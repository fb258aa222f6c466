"""Context parallelism (accelerate's ParallelismConfig cp_size, torch backend) on CPU: the accelerate config as
accelerate's own launcher reads it, the refusals, and the sharding of a micro-batch with an accelerator whose
``maybe_context_parallel`` splits the buffers as torch's load balancer does and whose attention is an exact
stand-in for torch's ring attention (each rank's queries against the keys of the whole window). Each shard must
carry the global position ids, its keys must equal the whole window's keys at those positions (so the rotation
saw the global ids), and the shards' losses and gradients, combined as FSDP combines them, must be the window's.
At the end, marked ``gpu``: torch's own context_parallel on one GPU, and the recipe on two."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import hf_trajpe
from hf_trajpe.training.context_parallel import (
    check_context_parallel,
    context_parallel_size,
    data_rank,
    global_position_ids,
    launched_context_parallel_size,
    refuse_cpu_launch,
    sharded_window,
    shifted_labels,
)
from hf_trajpe.training.pose import PoSECollator, skipped_positions

ROOT = Path(__file__).resolve().parents[2]
CP_CONFIG = ROOT / "configs" / "accelerate" / "fsdp2_cp.yaml"
SDPA = torch.nn.functional.scaled_dot_product_attention


# -- the accelerate config ---------------------------------------------------------------------------------------
def test_the_config_loads_with_accelerates_own_loader_and_launches_cp_2(monkeypatch):
    from accelerate import ParallelismConfig
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    cfg = load_config_from_file(str(CP_CONFIG))
    assert cfg.distributed_type == "FSDP" and cfg.fsdp_config["fsdp_version"] == 2
    assert cfg.parallelism_config["parallelism_config_cp_size"] == 2 == cfg.num_processes
    # what `accelerate launch --config_file ...` hands the processes, and what their accelerator builds from it
    args = launch_command_parser().parse_args(["--config_file", str(CP_CONFIG), "recipes/finetune.py"])
    args = _validate_launch_command(args)[0]
    assert args.use_parallelism_config and args.use_fsdp and args.fsdp_version == 2
    env = {k: v for k, v in prepare_multi_gpu_env(args).items() if k.startswith(("PARALLELISM", "ACCELERATE_USE"))}
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true" and env["PARALLELISM_CONFIG_CP_SIZE"] == "2"
    assert launched_context_parallel_size(env) == 2 and launched_context_parallel_size({}) == 1
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pc = ParallelismConfig()
    assert pc.cp_enabled and pc.cp_size == 2 and pc.cp_backend == "torch" and pc.total_size == 2
    # dp_shard x cp on 4 GPUs: the documented override
    args = launch_command_parser().parse_args(["--config_file", str(CP_CONFIG), "--num_processes", "4",
                                               "--parallelism_config_dp_shard_size", "2", "recipes/finetune.py"])
    env = prepare_multi_gpu_env(_validate_launch_command(args)[0])
    assert (env["PARALLELISM_CONFIG_DP_SHARD_SIZE"], env["PARALLELISM_CONFIG_CP_SIZE"]) == ("2", "2")


def test_data_ranks_are_the_groups_of_cp_ranks():
    pc = SimpleNamespace(cp_size=2, cp_enabled=True)
    ranks = [data_rank(SimpleNamespace(parallelism_config=pc, process_index=i, num_processes=4)) for i in range(4)]
    assert ranks == [(0, 2), (0, 2), (1, 2), (1, 2)]
    off = SimpleNamespace(parallelism_config=None, process_index=3, num_processes=4)
    assert context_parallel_size(off) == 1 and data_rank(off) == (3, 4)


# -- refusals ------------------------------------------------------------------------------------------------------
def tiny_llama(**extra) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.5, **extra)
    torch.manual_seed(0)
    return LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")


def tiny_gpt2() -> GPT2LMHeadModel:
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=64, attn_pdrop=0.0, resid_pdrop=0.0,
                     embd_pdrop=0.0, initializer_range=0.5)
    torch.manual_seed(0)
    return GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")


def check(model, handle, cp=2, task="clm", length=32, positions=None):
    check_context_parallel(cp, model, handle, task=task, length=length, positions=positions or length)


@pytest.mark.parametrize("encoding,options,reason", [
    ("trajectory", {"strength": 0.3}, "trajectory positions accumulate over the content"),
    ("cope", {}, "CoPE's gates\\) are counted over every earlier token"),
    ("alibi", {}, "ring attention takes no mask"),
    ("self_extend", {"group_size": 2, "window": 16}, "remap .* is meant to be applied without training"),
])
def test_encodings_that_need_the_prefix_a_mask_or_read_time_remaps_are_refused(encoding, options, reason):
    model = tiny_llama()
    handle = hf_trajpe.patch(model, encoding, **options)
    with pytest.raises(ValueError, match=f"context parallelism cannot train the patched encoding .*{reason}.*"
                                         "Train without the parallelism_config"):
        check(model, handle)
    check(model, handle, cp=1)  # without context parallelism nothing is refused


def test_a_model_whose_own_encoding_is_a_bias_is_refused():
    from transformers import BloomConfig, BloomForCausalLM

    model = BloomForCausalLM._from_config(BloomConfig(vocab_size=64, hidden_size=32, n_layer=1, n_head=4),
                                          attn_implementation="eager")  # (Bloom has no sdpa: refused for ALiBi first)
    with pytest.raises(ValueError, match="the model's own 'alibi' encoding: its bias"):
        check(model, None)


@pytest.mark.parametrize("rope,patched", [({"rope_type": "dynamic", "factor": 2.0}, False),
                                          ({"rope_type": "dynamic", "factor": 2.0}, True)])
def test_frequencies_that_follow_the_longest_position_are_refused(rope, patched):
    if patched:
        model = tiny_llama()
        handle = hf_trajpe.patch(model, "rope", rope_parameters=rope)
    else:
        model, handle = tiny_llama(rope_parameters={"rope_theta": 10000.0, **rope}), None
    with pytest.raises(ValueError, match="rope_type 'dynamic': its frequencies follow the largest position id"):
        check(model, handle)


def test_task_window_length_attention_and_table_are_checked():
    model = tiny_llama()
    with pytest.raises(ValueError, match="needs causal attention; model.task 'mlm'"):
        check(model, None, task="mlm")
    with pytest.raises(ValueError, match="2 x cp_size = 4 equal chunks; data.block_size 30 is not a multiple of 4"):
        check(model, None, length=30)
    with pytest.raises(ValueError, match="tensor parallelism"):
        check_context_parallel(2, model, None, task="clm", length=32, positions=32, tensor_parallel=2)
    with pytest.raises(ValueError, match=r"float32 cannot run this model's grouped-query attention \(4 query heads, "
                                         r"2 key/value heads\).*set train.mixed_precision: bf16"):
        check_context_parallel(2, model, None, task="clm", length=32, positions=32, mixed_precision="no")
    check_context_parallel(2, tiny_gpt2(), None, task="clm", length=32, positions=32, mixed_precision="no")
    eager = LlamaForCausalLM._from_config(model.config, attn_implementation="eager")
    with pytest.raises(ValueError, match="attention implementation 'eager': set model.attn_implementation: sdpa"):
        check(eager, None)
    gpt2 = tiny_gpt2()
    check(gpt2, None, length=64)
    with pytest.raises(ValueError, match="reach position 127, past the 64 positions of the model's own 'learned'"):
        check(gpt2, None, length=64, positions=128)  # PoSE's target_length past the table
    handle = hf_trajpe.patch(gpt2, "native")
    with pytest.raises(ValueError, match="past the 64 positions of the patched encoding"):
        check(gpt2, handle, length=64, positions=128)


@pytest.mark.parametrize("encoding,options", [(None, {}), ("rope", {}), ("none", {}),
                                              ("rope", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}})])
def test_encodings_that_read_position_ids_are_accepted(encoding, options):
    model = tiny_llama()
    check(model, hf_trajpe.patch(model, encoding, **options) if encoding else None)


def test_a_cpu_launch_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    from hf_trajpe.training import load_config
    from hf_trajpe.training.trainer import Trainer

    from .runs import FAST, TINY

    refuse_cpu_launch(1, "cpu")
    refuse_cpu_launch(2, "cuda")
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_SIZE", "2")
    cfg = load_config(TINY, [f"output_dir={tmp_path / 'run'}", "train.device=cpu", *FAST])
    trainer = Trainer(cfg)
    with pytest.raises(RuntimeError, match=r"context parallelism \(cp_size=2\) was asked for on CPU.*GPUs only.*"
                                           "configs/accelerate/fsdp2_cp.yaml"):
        trainer.setup()
    assert trainer.accelerator is None  # refused before the accelerator, and output_dir released (setup cleans up)
    Trainer(cfg).cleanup()


# -- the sharding, against the whole window --------------------------------------------------------------------------
def head_tail_shards(length: int, cp: int) -> list[torch.Tensor]:
    """The token indices of each rank, from torch's own load balancer (what ``context_parallel`` uses)."""
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer

    order = _HeadTailLoadBalancer(length, cp, "cpu")._generate_indices()[0].long()
    return list(order.chunk(cp))


class RingAccelerator:
    """``maybe_context_parallel`` of rank ``rank`` of a ``cp`` group, on one process: it first runs ``reference``
    on copies of the whole buffers (the whole window) and keeps each layer's keys and values, then shards the
    buffers in place as torch does, and inside answers each attention call of the shard as the ring attention
    would: its queries against the whole window's keys and values (its own rows spliced in, so that gradients
    flow through both), causally by global index. It checks what torch's ring attention needs: no mask tensor,
    the causal flag, and local keys that equal the window's at the shard's positions."""

    def __init__(self, cp: int, rank: int, reference) -> None:
        self.parallelism_config = SimpleNamespace(cp_size=cp, cp_enabled=True, cp_backend="torch")
        self.cp, self.rank, self.reference = cp, rank, reference
        self.process_index, self.num_processes = rank, cp
        self.key_checks = 0

    @contextlib.contextmanager
    def _sdpa(self, fn):
        torch.nn.functional.scaled_dot_product_attention = fn
        try:
            yield
        finally:
            torch.nn.functional.scaled_dot_product_attention = SDPA

    @contextlib.contextmanager
    def maybe_context_parallel(self, buffers, buffer_seq_dims, no_restore_buffers):
        assert set(map(id, no_restore_buffers)) <= set(map(id, buffers)) and len(buffers) == len(buffer_seq_dims)
        kept = []

        def record(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
            kept.append((k, v))
            return SDPA(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)

        with self._sdpa(record):
            self.reference([b.clone() for b in buffers])  # (the buffers are resized below)
        length = buffers[0].shape[buffer_seq_dims[0]]
        mine = head_tail_shards(length, self.cp)[self.rank]
        for buffer, dim in zip(buffers, buffer_seq_dims, strict=True):
            shard = buffer.index_select(dim, mine.to(buffer.device)).clone()
            buffer.resize_(shard.shape)
            buffer.copy_(shard)
        layer = iter(kept)

        def ring(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
            assert attn_mask is None and is_causal, "torch's ring attention takes the causal flag and no mask"
            whole_k, whole_v = next(layer)
            torch.testing.assert_close(k, whole_k.index_select(2, mine), rtol=0, atol=1e-5)
            self.key_checks += 1
            keys, values = whole_k.index_copy(2, mine, k), whole_v.index_copy(2, mine, v)
            allowed = mine[:, None] >= torch.arange(length)[None, :]
            return SDPA(q, keys, values, attn_mask=allowed, dropout_p=dropout_p, scale=scale, **kw)

        with self._sdpa(ring):
            yield
        assert next(layer, None) is None, "every layer of the window ran on the shard"


def whole(ids: torch.Tensor, extra: dict) -> dict:
    """The whole window's forward arguments: the all-ones mask the shards get too, so that both take the same
    attention path (a mask-free causal sdpa call, grouped heads unexpanded)."""
    return {"attention_mask": torch.ones_like(ids), **extra}


def window_forward(model, handle):
    """The reference of :class:`RingAccelerator`: the whole window, from the buffers (ids, targets, positions)."""

    def forward(buffers):
        with skipped_positions(model, handle, buffers[2]) as extra:
            model(input_ids=buffers[0], use_cache=False, **whole(buffers[2], extra))

    return forward


def window_loss_and_grads(model, handle, tokens, labels, ids):
    model.zero_grad(set_to_none=True)
    with skipped_positions(model, handle, ids) as extra:
        loss = model(input_ids=tokens, labels=labels, use_cache=False, **whole(ids, extra)).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def shard_losses_and_grads(model, handle, tokens, labels, ids, cp):
    """Each rank's loss and gradients, with what it saw; combined as the trainer's logging (mean over ranks)
    and FSDP (gradients averaged over ranks) combine them."""
    losses, grads, seen = [], [], []
    for rank in range(cp):
        acc = RingAccelerator(cp, rank, window_forward(model, handle))
        model.zero_grad(set_to_none=True)
        with sharded_window(acc, model, handle, tokens, labels, ids, cp) as shard:
            logits = model(input_ids=shard.input_ids, use_cache=False, **shard.model_kwargs).logits
            loss = shard.loss(logits)
            loss.backward()
        assert acc.key_checks == model.config.num_hidden_layers
        seen.append(shard)
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    mean_grads = {n: sum(g[n] for g in grads) / cp for n in grads[0]}
    return torch.stack(losses).mean(), mean_grads, seen


CASES = {
    "llama as built": (tiny_llama, None, {}),
    "llama patched rope": (tiny_llama, "rope", {}),
    "gpt2 as built": (tiny_gpt2, None, {}),
    "llama patched rope, yarn": (tiny_llama, "rope", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}),
    "llama patched rope on layer 1": (tiny_llama, "rope", {"layers": [1]}),
    "gpt2 patched native table": (tiny_gpt2, "native", {}),
    "gpt2 patched rope in attention": (tiny_gpt2, "rope", {}),
    "gpt2 patched sinusoidal": (tiny_gpt2, "sinusoidal", {}),
}


@pytest.mark.parametrize("pose", [False, True], ids=["arange", "pose"])
@pytest.mark.parametrize("case", list(CASES))
def test_shards_carry_global_ids_and_their_losses_and_gradients_are_the_windows(case, pose):
    build, encoding, options = CASES[case]
    model = build()
    handle = hf_trajpe.patch(model, encoding, **options) if encoding else None
    cp, b, n = 2, 2, 32
    tokens = torch.randint(0, 64, (b, n), generator=torch.Generator().manual_seed(1))
    labels = tokens.clone()
    labels[0, :5] = -100  # a loss mask: the prompt of a task row carries no loss
    target = 64 if pose else n
    ids = global_position_ids(b, n, SimpleNamespace(target_length=target, chunks=3) if pose else None, seed=3,
                              rank=0, index=7)
    check(model, handle, cp=cp, length=n, positions=target)
    window_loss, window_grads = window_loss_and_grads(model, handle, tokens, labels, ids)
    loss, grads, shards = shard_losses_and_grads(model, handle, tokens, labels, ids, cp)
    for rank, shard in enumerate(shards):
        mine = head_tail_shards(n, cp)[rank]
        assert torch.equal(shard.position_ids, ids[:, mine])  # global ids, not the shard's ranks
        assert torch.equal(shard.input_ids, tokens[:, mine])
        assert torch.equal(shard.shift_labels, shifted_labels(labels)[:, mine])  # shifted before sharding
        assert int(shard.targets) == int((labels[:, 1:] != -100).sum())  # the whole window's valid targets
    torch.testing.assert_close(loss, window_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == window_grads.keys()
    for name in window_grads:
        torch.testing.assert_close(grads[name], window_grads[name], rtol=1e-4, atol=1e-5)
    if handle is not None:
        assert all(h.state.position_skips is None for h in getattr(handle, "handles", [handle]))
    assert tokens.shape == (b, n) and ids.shape == (b, n)  # the caller's tensors are never the sharded buffers


def test_local_ranks_instead_of_global_ids_give_other_keys():
    """The check that makes the test above mean something: a shard run at its own ranks (what a rank computes
    when it is not handed the global ids) has keys that differ from the window's."""
    model = tiny_llama()
    tokens = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(2))
    ids = global_position_ids(1, 16)

    acc = RingAccelerator(2, 1, window_forward(model, None))
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        with sharded_window(acc, model, None, tokens, tokens, ids, 2) as shard:
            shard.position_ids.copy_(torch.arange(shard.position_ids.shape[1]))  # ranks 0..7 instead of global
            model(input_ids=shard.input_ids, use_cache=False, **shard.model_kwargs)


def test_pose_ids_are_drawn_alike_by_the_ranks_of_a_group():
    pose = SimpleNamespace(target_length=256, chunks=2)
    one = global_position_ids(2, 32, pose, seed=1, rank=0, index=4)
    assert torch.equal(one, global_position_ids(2, 32, pose, seed=1, rank=0, index=4))
    assert not torch.equal(one, global_position_ids(2, 32, pose, seed=1, rank=1, index=4))
    collator = PoSECollator(lambda f: {"input_ids": torch.zeros(2, 32, dtype=torch.long)}, 256, seed=1, rank=0)
    for _ in range(4):
        collator([])
    assert torch.equal(collator([])["position_ids"], one)  # the trainer's draw is the collator's (same generator)


class TrainerRing(RingAccelerator):
    """What the trainer's micro-batch step reads of its accelerator, on one CPU process."""

    device = torch.device("cpu")

    @staticmethod
    def backward(loss):
        loss.backward()


@pytest.mark.parametrize("encoding", [None, "rope"])
def test_the_trainers_micro_batch_step_under_cp_is_the_windows(tmp_path, encoding):
    """``Trainer._forward_backward`` with cp 2 (each rank's shard, PoSE ids drawn by the data rank, a loss mask):
    the ranks' mean loss and mean gradients are those of its step without context parallelism."""
    from hf_trajpe.training import load_config
    from hf_trajpe.training.trainer import Trainer

    from .runs import TINY

    cfg = load_config(TINY, [f"output_dir={tmp_path}", "pose.target_length=128", "pose.chunks=3"])
    trainer = Trainer.__new__(Trainer)  # the step's state only: no output_dir lock, accelerator or data
    trainer.cfg, trainer.model = cfg, tiny_llama()
    trainer.handle = hf_trajpe.patch(trainer.model, encoding) if encoding else None
    trainer.data_rank, trainer.tokenizer = 1, None
    blocks = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(blocks, dtype=torch.bool)
    mask[1, :9] = False

    def step(cp, accelerator):
        trainer.cp, trainer.accelerator = cp, accelerator
        trainer.model.zero_grad(set_to_none=True)
        loss = trainer._forward_backward(blocks, 5, mask, accum=2)
        return loss, {n: p.grad.clone() for n, p in trainer.model.named_parameters()}

    plain_loss, plain_grads = step(1, TrainerRing(2, 0, None))
    ranks = [step(2, TrainerRing(2, rank, window_forward(trainer.model, trainer.handle))) for rank in range(2)]
    torch.testing.assert_close(sum(r[0] for r in ranks) / 2, plain_loss, rtol=1e-5, atol=1e-6)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(sum(r[1][name] for r in ranks) / 2, grad, rtol=1e-4, atol=1e-5)


# -- on GPUs (make test-gpu; skipped here) ---------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make test-gpu on one)")


@contextlib.contextmanager
def one_rank_cp_mesh(monkeypatch):
    """A process group of one rank and its ``cp`` mesh of size 1: torch's own ``context_parallel`` (sharding and
    ring attention through its dispatcher) on one GPU, as accelerate binds it (``Accelerator._prepare_cp``)."""
    import socket

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                           LOCAL_RANK="0").items():
        monkeypatch.setenv(key, value)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        yield init_device_mesh("cuda", (1,), mesh_dim_names=("cp",))
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("case", ["llama as built", "llama patched rope", "gpt2 patched native table",
                                  "gpt2 patched rope in attention"])
def test_torch_context_parallel_on_one_gpu_gives_the_windows_loss_and_gradients(case, monkeypatch):
    """Under torch's real ``context_parallel`` (a group of one: the shard is the window, but the buffers go through
    its load balancer and DTensor, and attention through its ring dispatcher), the loss and gradients of the
    sharded step are the plain step's. Run on one GPU; several GPUs: the recipe test below."""
    import functools

    from torch.distributed.tensor.experimental import context_parallel

    build, encoding, options = CASES[case]
    model = build().cuda().to(torch.bfloat16)  # (float32 grouped-query attention is refused: see the checks)
    handle = hf_trajpe.patch(model, encoding, **options) if encoding else None
    tokens = torch.randint(0, 64, (2, 64), generator=torch.Generator().manual_seed(1)).cuda()
    labels = tokens.clone()
    labels[0, :5] = -100
    # a learned table (GPT-2) has no rows past n_positions
    positions = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    ids = global_position_ids(2, 64, SimpleNamespace(target_length=positions, chunks=2), seed=1).cuda()
    window_loss, window_grads = window_loss_and_grads(model, handle, tokens, labels, ids)
    with one_rank_cp_mesh(monkeypatch) as mesh:
        acc = SimpleNamespace(maybe_context_parallel=functools.partial(context_parallel, mesh=mesh))
        model.zero_grad(set_to_none=True)
        with sharded_window(acc, model, handle, tokens, labels, ids, 1) as shard:
            assert torch.equal(shard.position_ids, ids)
            loss = shard.loss(model(input_ids=shard.input_ids, use_cache=False, **shard.model_kwargs).logits)
            loss.backward()
    torch.testing.assert_close(loss.detach(), window_loss.float(), rtol=1e-3, atol=1e-4)
    for name, p in model.named_parameters():
        if name in window_grads:
            torch.testing.assert_close(p.grad, window_grads[name], rtol=1e-2, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (context parallelism over 2 ranks)")
def test_the_recipe_under_fsdp2_cp_starts_from_the_one_gpu_loss(tmp_path):
    """configs/accelerate/fsdp2_cp.yaml on 2 GPUs (cp 2: one data rank, as on one GPU): the run finishes and its
    first step's loss, before any update, is the one-GPU run's (bf16 in both)."""
    import subprocess

    from .runs import ROOT, env, launcher_cmd, losses

    tiny_rope = ROOT / "configs" / "experiments" / "tiny_rope.yaml"
    out = {}
    for name in ("gpu", "fsdp2_cp"):
        out[name] = tmp_path / name
        cmd = launcher_cmd(tiny_rope, out[name], "train.max_steps=2", "train.eval_every=0", "train.save_every=0",
                           accelerate_config=ROOT / "configs" / "accelerate" / f"{name}.yaml")
        proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{name}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    one, two = losses(out["gpu"]), losses(out["fsdp2_cp"])
    assert one.keys() == two.keys() == {1, 2}
    assert two[1] == pytest.approx(one[1], rel=2e-2)
