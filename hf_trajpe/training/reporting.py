"""What a run reports: the end-of-run summary and its last line, and the quieting of accelerate's
message about tied weights it drops from checkpoints."""

from __future__ import annotations

import ast
import logging

import torch

from .checkpoint import latest_checkpoint
from .stopping import exit_status

__all__ = ["RunReport", "tied_names"]


class _TiedWeightsFilter(logging.Filter):
    """Drops accelerate's "Removed shared tensor {...} while saving. This should be OK, but check ..." when
    the removed tensors are the model's own tied weights (an LM head tied to the input embeddings, as in
    GPT-2 and SmolLM2): safetensors cannot hold two names for one storage, accelerate keeps one, and
    ``load_state`` restores the tie (the resume tests compare loss curves to 1e-6). Any other removal
    still warns."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        start, end = message.find("Removed shared tensor {"), message.find("} while saving")
        if start < 0 or end < start:
            return True
        try:
            removed = ast.literal_eval(message[message.index("{", start):end + 1])
        except (ValueError, SyntaxError):
            return True
        return not (removed and set(removed) <= self.names)


def tied_names(model: torch.nn.Module) -> set[str]:
    """Names of the parameters and buffers of ``model`` that share their storage with another one."""
    by_storage: dict = {}
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        by_storage.setdefault((t.device, t.untyped_storage().data_ptr()), set()).add(name)
    return {name for names in by_storage.values() if len(names) > 1 for name in names}


class RunReport:
    """The summary part of :class:`~hf_trajpe.training.trainer.Trainer` (reads its config, steps, losses,
    evaluations and output paths)."""

    def stop_line(self) -> str:
        """The last line of a run: why it stopped, where its checkpoint is, the exit status."""
        reason = self.stop_reason or "done"
        status = exit_status(reason)
        if reason == "done":
            return f"[hf_trajpe] done at step {self.step}; exit status {status}"
        detail = f": {self.stop_detail}" if self.stop_detail and reason != "stop_after" else ""
        latest = latest_checkpoint(self.ckpt_root)
        where = f"checkpoint {latest}; continue with --resume" if latest else "no checkpoint yet"
        return f"[hf_trajpe] stopped at step {self.step} ({reason}{detail}); {where}; exit status {status}"

    def summary(self) -> list[str]:
        """The end-of-run report of the recipe, one line per item, the last one :meth:`stop_line`: steps,
        training time, the last train loss, the last evaluation per content type (and whether it was the
        stopped model's), where the final model, the checkpoint and the logs are."""
        cfg, t = self.cfg, self.cfg.train
        p = "[hf_trajpe]  "
        trained = self.step - self.start_step
        resumed = f", resumed at step {self.start_step}" if self.start_step else ""
        lines = [f"[hf_trajpe] summary of {cfg.name}: {self.step} of {t.max_steps} steps ({self.stop_reason or 'done'}"
                 f"{resumed})"]
        if trained:
            lines.append(f"{p}trained {trained} step(s) in {self.train_seconds:.3g} s "
                         f"({self.train_seconds / trained:.3g} s per step, evaluation and saving excluded)")
        if self.step in self.losses:
            first = min(self.losses)
            before = f" (step {first}: {self.losses[first]:.4f})" if first != self.step else ""
            lines.append(f"{p}train loss at step {self.step}: {self.losses[self.step]:.4f}{before}")
        last = self.eval_history[-1] if self.eval_history else None
        if last is None:
            lines.append(f"{p}evaluation: none ran (train.eval_every={t.eval_every}; a run evaluates at its last "
                         "step and when it stops)")
        else:
            types = {k: v for k, v in last.items() if k != "step"}
            which = "the stopped model, evaluated after its checkpoint" if (
                self.stop_evaluated and last["step"] == self.step) else "the latest evaluation"
            mean = sum(v["loss"] for v in types.values()) / max(1, len(types))
            lines.append(f"{p}evaluation at step {last['step']} ({which}): mean loss {mean:.4f} over "
                         f"{len(types)} content type(s)")
            w = max(len(name) for name in [*types, "content type"])
            lines.append(f"{p}  {'content type':<{w}} {'loss':>8} {'perplexity':>11} {'accuracy':>9}")
            for name, v in types.items():
                lines.append(f"{p}  {name:<{w}} {v['loss']:>8.4f} {v['perplexity']:>11.2f} {v['accuracy']:>9.4f}")
        if self.final is not None:
            lines.append(f"{p}model: {self.final} (reload with hf_trajpe.from_pretrained)")
        else:
            lines.append(f"{p}model: not saved to {self.out / 'final'} (the run stopped before its last step); the "
                         "checkpoint holds it")
        latest = latest_checkpoint(self.ckpt_root)
        if latest is not None:
            lines.append(f"{p}checkpoint: {latest}")
        logs = []
        if "tensorboard" in cfg.logging.trackers:
            logs.append(f"{self.out / 'logs'} (TensorBoard)")
        if "jsonl" in cfg.logging.trackers:
            logs.append(str(self.out / "metrics.jsonl"))
        if self.eval_history:
            logs.append(f"{self.out / 'eval.json'} (evaluations)")
        lines.append(f"{p}logs: {', '.join(logs) or 'none (logging.trackers is empty)'}")
        lines.append(self.stop_line())
        return lines

    def report(self) -> None:
        """Print :meth:`summary` (the main process only)."""
        if self.accelerator is not None and self.accelerator.is_main_process:
            for line in self.summary():
                self.log(line)
