"""Saving a run: checkpoints, the final model (LoRA merged; under FSDP the patch re-saved from the
gathered state), the per-process summaries, and the checks a resume makes on what it loads.
A part of :class:`~hf_trajpe.training.trainer.Trainer`."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import torch

from .checkpoint import save_checkpoint
from .files import atomic_write_text
from .model import is_lora

__all__ = ["PATCH_STATE_PREFIX", "RunSaving"]

PATCH_STATE_PREFIX = "hf_trajpe."  # the patch's submodule (model.hf_trajpe) in a model's state dict


class RunSaving:
    """Checkpoints and the final model of a trainer (uses its accelerator, config, model, data and losses)."""

    def save_checkpoint(self) -> Path:
        acc, t = self.accelerator, self.cfg.train
        state = {"step": self.step, "micro_batches": self.step * t.gradient_accumulation_steps,
                 "world_size": acc.num_processes, "batch_size": t.batch_size,
                 "gradient_accumulation_steps": t.gradient_accumulation_steps, "max_steps": t.max_steps,
                 "seed": self.cfg.seed, "eval_history": self.eval_history,
                 "scheduler": self.scheduler.state_dict()}
        return save_checkpoint(self.ckpt_root, self.step, state, acc.save_state, acc.is_main_process,
                               acc.wait_for_everyone, t.keep_last)

    def save_final(self) -> Path:
        """The patched model in ``output_dir/final`` (reload with ``hf_trajpe.from_pretrained``), its
        tokenizer, and ``ranks/rank_<i>.json`` (world size, loss curve, a parameter checksum) per process."""
        acc = self.accelerator
        final = self.out / "final"
        unwrapped = acc.unwrap_model(self.model)
        if is_lora(unwrapped):
            # the adapters merged into the base weights: final/ is an ordinary patched checkpoint (no peft needed)
            self._final_model = unwrapped.merge_and_unload()
            state_dict = self._final_model.state_dict()
            self._final_model.save_pretrained(str(final), is_main_process=acc.is_main_process, save_function=acc.save)
        else:
            state_dict = acc.get_state_dict(self.model)  # every process: FSDP gathers the shards
            unwrapped.save_pretrained(str(final), is_main_process=acc.is_main_process, save_function=acc.save,
                                      state_dict=state_dict)
        if acc.is_main_process:
            if self.fsdp and self.handle is not None:
                self._save_gathered_patch(final, state_dict)
            self.tokenizer.save_pretrained(str(final))
        self._write_rank_summary(state_dict)
        acc.wait_for_everyone()
        self.final = final
        return final

    def _save_gathered_patch(self, final: Path, state_dict: dict) -> None:
        """Under FSDP this process's patch module holds shards of the learnable strength: the patch is
        saved again (``hf_trajpe.save_patch``) from a CPU copy of the saved model, patched alike and
        loaded with the patch state of the gathered ``state_dict``."""
        from ..patching import patch, save_patch
        from .model import auto_model_class

        copy = auto_model_class(self.cfg.model.task).from_pretrained(str(final))
        handle = patch(copy, self.handle.config)
        handle.state.load_state_dict({k[len(PATCH_STATE_PREFIX):]: v.detach().cpu()
                                      for k, v in state_dict.items() if k.startswith(PATCH_STATE_PREFIX)})
        save_patch(copy, final)

    def _write_rank_summary(self, state_dict: dict) -> None:
        acc = self.accelerator
        checksum = None
        if state_dict:
            checksum = float(sum(v.detach().double().sum() for v in state_dict.values() if torch.is_tensor(v)))
        summary = {"rank": acc.process_index, "world_size": acc.num_processes,
                   "distributed_type": acc.distributed_type.value, "step": self.step, "stop_reason": self.stop_reason,
                   "losses": {str(k): v for k, v in self.losses.items()},
                   "local_losses": {str(k): v for k, v in self.local_losses.items()}, "param_checksum": checksum,
                   "train_seconds": getattr(self, "train_seconds", None)}
        if acc.is_main_process:  # a probe to check that the saved model reloads to the same outputs
            probe = next(iter(self.data.eval_blocks.values()), self.data.train)[:2]
            summary["probe_input_ids"] = probe.tolist()
            summary["probe_logits_sum"] = self._probe(probe)
        atomic_write_text(self.out / "ranks" / f"rank_{acc.process_index}.json", json.dumps(summary, indent=2) + "\n")

    @torch.no_grad()
    def _probe(self, ids: torch.Tensor) -> float | None:
        if self.fsdp:
            return None
        model = self._final_model if self._final_model is not None else self.accelerator.unwrap_model(self.model)
        model.eval()
        logits = model(input_ids=ids.to(self.accelerator.device)).logits.float()
        model.train()
        value = float(logits.double().sum())
        return value if math.isfinite(value) else None

    # -- resuming: what a checkpoint must hold ------------------------------------------------------------
    def _check_rng_state(self, index: int) -> None:
        """This process's RNG file must load with accelerate's own loader (``torch.load(weights_only=True)``
        and numpy arrays): ``accelerate.load_state`` would skip an unreadable one silently and resume with
        other random states."""
        from accelerate.utils import load
        from accelerate.utils.constants import RNG_STATE_NAME

        from .files import RunFileError

        path = self.resume_from / f"{RNG_STATE_NAME}_{index}.pkl"
        if not path.is_file():
            raise RunFileError(f"{path} is missing: the checkpoint lacks the random states of process {index}")
        try:
            load(path)
        except Exception as err:  # any failure of the restricted unpickler
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RunFileError(f"{path}: cannot be read with torch.load(weights_only=True) ({reason}); the "
                               "checkpoint is damaged or holds more than random states: resume only checkpoints "
                               "you trust") from None

    def _load_scheduler(self, state: dict) -> None:
        """The scheduler's state from ``trainer_state.json``; a checkpoint saved before it was stored
        there: the schedule is a function of the step, so the scheduler is stepped to it."""
        saved = state.get("scheduler")
        if saved is not None:
            self.scheduler.load_state_dict(saved)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()"
            for _ in range(int(state["step"])):
                self.scheduler.step()
