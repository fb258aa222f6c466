"""The training loop of ``recipes/finetune.py`` and of the study (``hf_trajpe.study``), on ``accelerate``:
one loop from one CPU process to DDP and FSDP on GPUs.

- Gradient accumulation (``no_sync`` on all but the last micro-batch), mixed precision from the config
  (``auto``: bf16/fp16 on GPUs, ``no`` on CPU), gradient clipping, a warm-up + decay schedule stepped
  once per optimizer step whatever the number of processes.
- Deterministic data order (:mod:`hf_trajpe.training.data`): a resumed run sees exactly the batches the
  uninterrupted run would have seen, so its loss curve is the same. A non-finite loss stops the run.
- PoSE (``pose`` in the config, :mod:`hf_trajpe.training.pose`): each micro-batch's position ids skip,
  drawn from ``(seed, process, micro-batch index)``; evaluation runs at the windows' own ids.
- Context parallelism (accelerate's ``parallelism_config`` with ``cp_size``, on FSDP2:
  :mod:`hf_trajpe.training.context_parallel`): each window split over ``cp`` GPUs, each rank handed the
  global position ids of its shard, the labels shifted before sharding; the rows are split over the groups.
- Periodic evaluation per content type through :func:`hf_trajpe.evaluation.score_blocks`.
- Tracker logging (TensorBoard, JSON lines) of loss, learning rate, gradient norm, tokens/s, the
  strength, and the counters of the patch's monitor (docs/spec.md, section 5).
- Atomic checkpoints (:mod:`hf_trajpe.training.checkpoint`); SIGTERM or SIGINT sets a flag, the loop saves
  a checkpoint at the next step boundary, evaluates the stopped model (after the checkpoint, so a stop
  never waits for the evaluation) and returns ``"SIGTERM"``/``"SIGINT"`` (the recipe then exits with
  :func:`exit_status`: 143 or 130). A second SIGINT interrupts at once, without a checkpoint.
- :meth:`Trainer.summary`: what the run did (steps, losses, the last evaluation per content type, where the
  model, checkpoint and logs are), ending with the line that says why it stopped and the exit status.
- LoRA (``model.lora``): the final model is saved with the adapters merged into its weights, an ordinary
  patched checkpoint.
- ``watch_parent``: the pid of the launcher that started this process (``accelerate launch``, torchrun).
  A one-process ``accelerate launch`` does not forward signals: killed, it leaves its child orphaned
  (docs/notes.md, section 10). A thread polls ``os.getppid()``; when the launcher is gone the trainer stops
  as on SIGTERM (checkpoint, status 143).
- The main process holds an exclusive lock on ``output_dir`` (:class:`hf_trajpe.training.files.OutputLock`)
  while it runs, and removes the leftovers of interrupted saves before it looks for a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import torch

from ..evaluation.masking import lm_inputs
from ..paths import writable_dir
from .checkpoint import find_resume, read_trainer_state
from .config import ExperimentConfig
from .context_parallel import (
    LaunchError,
    check_context_parallel,
    context_parallel_size,
    data_rank,
    global_position_ids,
    launched_context_parallel_size,
    refuse_cpu_launch,
    sharded_window,
)
from .data import RunData, build_run_data, iterate_rows
from .files import OutputLock, RunFileError, atomic_write_text, clean_leftovers
from .model import build_model, check_paths, is_lora, load_run_tokenizer
from .optimization import build_optimizer, build_scheduler
from .pose import check_pose_model, pose_batch, pose_generator, skipped_positions
from .reporting import RunReport, _TiedWeightsFilter, tied_names
from .saving import RunSaving
from .stopping import LAUNCHER_ENV, STOP_SIGNALS, StopControl, exit_status, launcher_pid

__all__ = ["LAUNCHER_ENV", "STOP_SIGNALS", "Trainer", "check_paths", "exit_status", "launcher_pid",
           "resolve_mixed_precision"]

#: the logger of accelerate's "Removed shared tensor {...} while saving" (checkpoints of tied weights)
SHARED_TENSOR_LOGGER = "accelerate.utils.other"


def resolve_mixed_precision(setting: str, device: str = "auto") -> str:
    """``auto``: ``bf16`` on a CUDA GPU that supports it, ``fp16`` on other CUDA GPUs, else (and with
    ``device="cpu"``) ``no``."""
    if setting != "auto":
        return setting
    if device != "cpu" and torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "no"


def _print(message: str) -> None:
    try:
        print(message, flush=True)
    except OSError:  # stdout closed (its reader died with the launcher): the run must go on saving
        pass


class Trainer(StopControl, RunReport, RunSaving):
    """``Trainer(cfg, resume=False | True | "path/to/step_N").setup()``, then ``train()``,
    ``save_final()`` (when it returned ``"done"``), ``report()``, ``cleanup()`` (what ``recipes/finetune.py``
    does).

    ``data``: the run's :class:`RunData` when the caller built it already (with :func:`build_run_data`
    from ``cfg.data``; the study builds it once for all its runs); ``log``: where the trainer's messages
    go (default: stdout); ``watch_parent``: the launcher's pid (:func:`launcher_pid`), whose exit stops
    the run like a SIGTERM."""

    def __init__(self, cfg: ExperimentConfig, resume: bool | str = False, data: RunData | None = None,
                 log=_print, watch_parent: int | None = None) -> None:
        self.cfg = cfg
        self.log = log
        self._data = data
        self.out = Path(cfg.output_dir)
        self.ckpt_root = self.out / "checkpoints"
        self.step = 0
        self.stop_reason: str | None = None
        self.stop_detail = ""
        self.losses: dict[int, float] = {}
        self.local_losses: dict[int, float] = {}  # this process's own loss, before the mean over processes
        self.eval_history: list[dict] = []
        self.stop_evaluated = False  # the stopped model was evaluated after its checkpoint
        self.last_eval_step: int | None = None  # on every process (the history is the main process's)
        self.start_step = 0
        self.train_seconds = 0.0
        self.final: Path | None = None
        self._final_model = None
        self._tied_filter: _TiedWeightsFilter | None = None
        self.accelerator = None
        self._signal: int | None = None
        self._sigints = 0
        self._old_handlers: dict = {}
        self._parent = watch_parent
        self._watch_done = threading.Event()
        self._watcher: threading.Thread | None = None
        check_paths(cfg)  # a missing model or data path fails here, before anything is launched or built
        try:  # an output_dir that is a file, or not writable: said now, not as a traceback mid-setup
            writable_dir(self.out, "output_dir")
        except ValueError as err:
            raise RunFileError(str(err)) from None
        self._resume = resume
        self._lock = OutputLock(self.out)
        if int(os.environ.get("RANK", "0")) == 0:  # the main process (accelerate is not set up yet)
            self._lock.acquire(log=self.log)  # refused while another trainer runs in output_dir
        try:
            if self._lock.held:
                clean_leftovers(self.out, self.log)
            self.resume_from: Path | None = find_resume(self.ckpt_root, resume, self.log)
        except BaseException:
            self._lock.release()
            raise

    # -- setup ---------------------------------------------------------------------------------------
    def setup(self) -> Trainer:
        """Accelerator, data, model, optimizer, checkpoint, trackers; on failure the trainer is cleaned up
        (``output_dir`` released) before the error propagates."""
        try:
            return self._setup()
        except BaseException:
            self.cleanup()
            raise

    def _setup(self) -> Trainer:
        from accelerate import Accelerator, DistributedType
        from accelerate.utils import ProjectConfiguration, set_seed

        from .tracking import JSONLTracker

        cfg = self.cfg
        resume_step = read_trainer_state(self.resume_from)["step"] if self.resume_from else None
        log_with, init_kwargs = [], {}
        if "tensorboard" in cfg.logging.trackers:
            log_with.append("tensorboard")
            if resume_step is not None:
                init_kwargs["tensorboard"] = {"purge_step": resume_step + 1}
        if "jsonl" in cfg.logging.trackers:
            log_with.append(JSONLTracker(self.out, resume_step))
        # before the accelerator, whose FSDP2 set-up on CPU would fail less clearly
        refuse_cpu_launch(launched_context_parallel_size(),
                          "cpu" if cfg.train.device == "cpu" or not torch.cuda.is_available() else "cuda")
        self.accelerator = acc = Accelerator(
            cpu=cfg.train.device == "cpu",
            mixed_precision=resolve_mixed_precision(cfg.train.mixed_precision, cfg.train.device),
            log_with=log_with or None,
            project_config=ProjectConfiguration(project_dir=str(self.out), logging_dir=str(self.out / "logs")),
        )
        self._check_launch()
        if self._resume is True and acc.num_processes > 1:
            # the main process looked after taking the lock: a trainer that was stopping may have saved since
            acc.wait_for_everyone()
            self.resume_from = find_resume(self.ckpt_root, True, lambda message: None)
        self.fsdp = acc.distributed_type == DistributedType.FSDP
        self.cp = context_parallel_size(acc)
        refuse_cpu_launch(self.cp, acc.device.type)
        self.data_rank, self.data_world = data_rank(acc)  # the cp ranks of a group train on the same rows
        self.log(f"[hf_trajpe] rank {acc.process_index} of world size {acc.num_processes} "
                 f"({acc.distributed_type.value}, device {acc.device}, mixed precision {acc.mixed_precision})")

        # the model before the data, so that what needs the model (the PoSE refusals) is said before the data is
        # built; the seed right before the model: its init draws from the torch RNG, the data does not
        self.tokenizer = load_run_tokenizer(cfg.model)
        set_seed(cfg.seed)
        model, self.handle = build_model(cfg, self.tokenizer)
        if is_lora(model):
            if self.fsdp:
                raise RuntimeError("model.lora is not supported under FSDP; use DDP or one process")
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            total = sum(p.numel() for p in model.parameters())
            self.log(f"[hf_trajpe] LoRA: {trainable:,} trainable parameters of {total:,}")
        if cfg.pose is not None:  # refused before the data is built where position ids mean nothing
            check_pose_model(model, self.handle, cfg.pose.target_length)
        self.data: RunData = (self._data if self._data is not None
                              else build_run_data(cfg.data, self.tokenizer, cfg.model.task))
        if self.data.loss_mask is not None and cfg.model.task != "clm":
            raise ValueError("rows with a loss mask train a causal LM only (model.task: clm)")
        block = self.data.train.shape[1]
        check_context_parallel(self.cp, model, self.handle, task=cfg.model.task, length=block,
                               positions=cfg.pose.target_length if cfg.pose is not None else block,
                               tensor_parallel=getattr(acc.parallelism_config, "tp_size", 1),
                               mixed_precision=acc.mixed_precision)
        self.monitor = self.handle.attach_monitor() if self.handle is not None else None
        optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], cfg)
        self.scheduler = build_scheduler(optimizer, cfg)  # not prepared: stepped once per step, any world size
        self.model, self.optimizer = acc.prepare(model, optimizer)
        tied = tied_names(acc.unwrap_model(self.model))
        if tied:
            self._tied_filter = _TiedWeightsFilter(tied)
            logging.getLogger(SHARED_TENSOR_LOGGER).addFilter(self._tied_filter)
        # the scheduler's state goes into trainer_state.json, not into a pickle (docs/finetune.md, "Resuming")
        if self.resume_from is not None:
            state = read_trainer_state(self.resume_from)
            for key, now in (("world_size", acc.num_processes), ("batch_size", cfg.train.batch_size),
                             ("gradient_accumulation_steps", cfg.train.gradient_accumulation_steps)):
                if state.get(key) != now:
                    warnings.warn(f"resuming with {key}={now}, the checkpoint was saved with {state.get(key)}: the "
                                  "data order (hence the loss curve) differs from an uninterrupted run", stacklevel=2)
            self._check_rng_state(acc.process_index)
            acc.load_state(str(self.resume_from))
            self._load_scheduler(state)
            self.step = int(state["step"])
            self.eval_history = state.get("eval_history", [])
            if acc.is_main_process:
                self.log(f"[hf_trajpe] resumed from {self.resume_from} at step {self.step}")
        if acc.is_main_process:
            cfg.save(self.out / "config.yaml")
        acc.init_trackers(cfg.logging.project, config=cfg.flat(), init_kwargs=init_kwargs)
        return self

    def _check_launch(self) -> None:
        """Fail loudly on accelerate's silent CPU traps (docs/notes.md, section 1)."""
        acc = self.accelerator
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched != acc.num_processes:
            raise LaunchError(
                f"{launched} processes were launched but accelerate set up a world of {acc.num_processes} "
                f"({acc.distributed_type.value}): on CPU launch with ACCELERATE_USE_CPU=true and --multi_gpu "
                "(or configs/accelerate/cpu_2proc.yaml)")
        if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and acc.distributed_type.value != "FSDP":
            raise LaunchError(
                f"the accelerate config asks for FSDP but accelerate set up {acc.distributed_type.value}: accelerate "
                "runs FSDP on GPUs only (on CPU it falls back silently); use configs/accelerate/cpu_2proc.yaml on CPU")

    # -- training --------------------------------------------------------------------------------------

    def _micro_seed(self, k: int) -> int:
        return (self.cfg.seed * 1_000_003 + k) * 4099 + self.accelerator.process_index

    def _forward(self, blocks: torch.Tensor, k: int, loss_mask: torch.Tensor | None = None) -> torch.Tensor:
        cfg, acc = self.cfg, self.accelerator
        if loss_mask is not None:  # rows that say which tokens carry the loss (causal LM: checked at setup)
            inputs, labels = blocks, torch.where(loss_mask, blocks, torch.full_like(blocks, -100))
        else:
            inputs, labels = lm_inputs(blocks, cfg.model.task, self.tokenizer, seed=self._micro_seed(k),
                                       mlm_probability=cfg.model.mlm_probability)
        kwargs = {"use_cache": False} if cfg.model.task == "clm" else {}
        inputs, labels = inputs.to(acc.device), labels.to(acc.device)
        # no attention_mask: training blocks have no padding, and an all-ones mask changes trajectory
        # gradients in the last bits (the study's models were trained without one)
        if cfg.pose is None:
            return self.model(input_ids=inputs, labels=labels, **kwargs).loss
        ids = pose_batch(inputs.shape[0], inputs.shape[1], cfg.pose.target_length, cfg.pose.chunks,
                         pose_generator(cfg.seed, self.data_rank, k)).to(acc.device)
        with skipped_positions(self.model, self.handle, ids) as extra:
            return self.model(input_ids=inputs, labels=labels, **kwargs, **extra).loss

    def _forward_backward(self, blocks: torch.Tensor, k: int, loss_mask: torch.Tensor | None,
                          accum: int) -> torch.Tensor:
        """Forward and backward of micro-batch ``k``; returns its loss (over ``accum``), detached. Under context
        parallelism both run inside the sharding context, on this rank's shard."""
        acc = self.accelerator
        if self.cp == 1:
            loss = self._forward(blocks, k, loss_mask) / accum
            acc.backward(loss)
            return loss.detach()
        cfg = self.cfg
        labels = blocks if loss_mask is None else torch.where(loss_mask, blocks, torch.full_like(blocks, -100))
        ids = global_position_ids(blocks.shape[0], blocks.shape[1], cfg.pose, seed=cfg.seed, rank=self.data_rank,
                                  index=k)
        with sharded_window(acc, self.model, self.handle, blocks.to(acc.device), labels.to(acc.device),
                            ids.to(acc.device), self.cp) as shard:
            logits = self.model(input_ids=shard.input_ids, use_cache=False, **shard.model_kwargs).logits
            loss = shard.loss(logits) / accum
            acc.backward(loss)
        return loss.detach()

    def train(self) -> str:
        """Train to ``train.max_steps`` (or ``train.stop_after``, or a SIGTERM/SIGINT, or the launcher's
        exit). Returns why it stopped: ``"done"``, ``"stop_after"``, ``"SIGTERM"`` (the launcher's exit
        included: :attr:`stop_detail` says so) or ``"SIGINT"``; :func:`exit_status` maps it to a status."""
        from tqdm.auto import tqdm

        cfg, acc = self.cfg, self.accelerator
        t = cfg.train
        accum = t.gradient_accumulation_steps
        batches = iterate_rows(self.data, t.batch_size, self.data_rank, self.data_world,
                               cfg.seed, start=self.step * accum, order=cfg.data.order)
        block = self.data.train.shape[1]
        tokens_per_step = t.batch_size * block * accum * self.data_world
        bar = tqdm(total=t.max_steps, initial=self.step, desc=f"{cfg.name}", unit="step", dynamic_ncols=True,
                   disable=not (acc.is_main_process and cfg.logging.progress))
        self._install_signal_handlers()
        self.model.train()
        window_seconds, window_tokens = 0.0, 0  # training time only: evaluation and saving excluded
        self.train_seconds = 0.0
        self.start_step = self.step
        reason = "done"
        if self.step < t.max_steps:  # a stop asked for during set-up: nothing trained since the checkpoint
            if self._parent is not None and os.getppid() != self._parent:
                self.request_stop(signal.SIGTERM, f"the launcher, pid {self._parent}, exited")
            if self._signal is not None:
                acc.set_trigger()
            if acc.check_trigger():
                reason = self._signal_name()
        if t.eval_at_start and self.step == 0 and reason == "done" and not self.eval_history:
            self.evaluate()  # step 0: the model as patched, before any training (where a recovery curve starts)
        while self.step < t.max_steps and reason == "done":
            step_start = time.perf_counter()
            step_loss = torch.zeros((), device=acc.device)
            for i in range(accum):
                k, blocks, loss_mask = next(batches)
                sync = contextlib.nullcontext() if i == accum - 1 else acc.no_sync(self.model)
                with sync:
                    step_loss += self._forward_backward(blocks, k, loss_mask, accum)
            grad_norm = None
            if t.max_grad_norm is not None:
                grad_norm = acc.clip_grad_norm_(self.model.parameters(), t.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            self.local_losses[self.step] = float(step_loss)  # before the mean: evidence of this rank's own data
            loss_value = float(acc.reduce(step_loss, reduction="mean"))
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"{cfg.name}: the loss became {loss_value} at step {self.step}; lower "
                                         "the learning rate or check the encoding options")
            seconds = time.perf_counter() - step_start
            window_seconds += seconds
            self.train_seconds += seconds
            window_tokens += tokens_per_step
            self.losses[self.step] = loss_value
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.4f}")

            if self._signal is not None:
                acc.set_trigger()
            stop_signal = acc.check_trigger()
            last = self.step == t.max_steps
            stop_after = t.stop_after is not None and self.step >= t.stop_after and not last

            if self.step % t.log_every == 0 or last:
                self._log_train(loss_value, grad_norm, window_tokens / window_seconds if window_seconds > 0 else 0.0)
                window_seconds, window_tokens = 0.0, 0
            if (t.eval_every and self.step % t.eval_every == 0) or last:
                self.evaluate()
            if (t.save_every and self.step % t.save_every == 0) or last or stop_signal or stop_after:
                self.save_checkpoint()
            if stop_signal:
                reason = self._signal_name()
                break
            if stop_after:
                reason = "stop_after"
                break
        bar.close()
        self.stop_reason = reason
        if reason != "done" and self.step > self.start_step and self.last_eval_step != self.step:
            self.evaluate()  # the stopped model, after its checkpoint: written to eval.json, not to the checkpoint
            self.stop_evaluated = True
        return reason

    def _strength_value(self) -> float | None:
        strength = getattr(self.handle.state, "strength", None) if self.handle is not None else None
        if strength is None or self.fsdp or not hasattr(strength, "value"):
            return None
        value = strength.value
        return float(value.detach().float().mean()) if torch.is_tensor(value) else float(value)

    def _log_train(self, loss: float, grad_norm, tokens_per_second: float) -> None:
        values = {"train/loss": loss, "train/lr": self.scheduler.get_last_lr()[0],
                  "train/tokens_per_second": tokens_per_second,
                  "train/tokens": self.step * self.cfg.train.batch_size * self.data.train.shape[1]
                  * self.cfg.train.gradient_accumulation_steps * self.data_world}
        if grad_norm is not None:
            values["train/grad_norm"] = float(grad_norm)
        strength = self._strength_value()
        if strength is not None:
            values["train/strength"] = strength
        if self.monitor is not None:  # the counters of docs/spec.md, section 5, since the last log
            values.update({f"monitor/{k}": v for k, v in self.monitor.as_dict().items()})
            self.monitor.reset()
        self.accelerator.log(values, step=self.step)

    # -- evaluation --------------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """Per content type: cross-entropy, perplexity and accuracy on the validation blocks
        (``hf_trajpe.evaluation.score_blocks``); logged as ``eval/<type>/...``."""
        from ..evaluation import score_blocks

        acc = self.accelerator
        results: dict = {}
        self.last_eval_step = self.step
        if self.fsdp or acc.is_main_process:
            target = self.model if self.fsdp else acc.unwrap_model(self.model)
            monitor = self.handle.detach_monitor() if self.handle is not None else None
            try:
                for t, blocks in self.data.eval_blocks.items():
                    s = score_blocks(target, blocks, self.cfg.model.task, self.cfg.train.batch_size,
                                     self.tokenizer, mask_seed=self.cfg.data.seed)
                    results[t] = {"loss": s.metrics["cross_entropy"], "perplexity": s.metrics["perplexity"],
                                  "accuracy": s.metrics["accuracy"]}
            finally:
                if self.handle is not None:
                    self.handle.attach_monitor(monitor)
                self.model.train()
        acc.wait_for_everyone()
        if results:
            values = {f"eval/{t}/{k}": v for t, r in results.items() for k, v in r.items()}
            values["eval/mean_loss"] = sum(r["loss"] for r in results.values()) / len(results)
            acc.log(values, step=self.step)
            self.eval_history = [e for e in self.eval_history if e["step"] != self.step]
            self.eval_history.append({"step": self.step, **results})
            if acc.is_main_process:
                atomic_write_text(self.out / "eval.json", json.dumps(self.eval_history, indent=2) + "\n")
        return results

    def cleanup(self) -> None:
        """Restore the signal handlers, stop watching the launcher, end the trackers, release
        ``output_dir``. Safe to call when :meth:`setup` failed or never ran."""
        self._restore_signal_handlers()
        if self._tied_filter is not None:
            logging.getLogger(SHARED_TENSOR_LOGGER).removeFilter(self._tied_filter)
            self._tied_filter = None
        try:
            if self.accelerator is not None:
                self.accelerator.end_training()
                self._end_process_group()
        finally:
            self._lock.release()

    def _end_process_group(self) -> None:
        """Tear the process group down once every rank is done with it: left to interpreter exit, gloo's
        threads can abort a rank ("terminate called without an active exception") after a good run."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and self.accelerator.num_processes > 1:
            with contextlib.suppress(Exception):  # a rank that already failed: exit as it is
                dist.barrier()
                dist.destroy_process_group()
