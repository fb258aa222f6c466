"""Fine-tune a patched transformers model on the content types, with accelerate.

    accelerate launch --config_file configs/accelerate/cpu.yaml recipes/finetune.py \
        --config configs/experiments/tiny_trajectory.yaml [key=value ...] [--resume]

The shape of a torchtune recipe: setup, train, save, report, cleanup; the logic is in hf_trajpe.training.
At the end it prints a summary (steps, losses, the last evaluation per content type, where the model,
checkpoint and logs are) whose last line says why the run stopped and the exit status.
Exit status: 0 when the run is done (or stopped by train.stop_after), 2 for a bad config, a launch that
cannot run (context parallelism on CPU), a bad path, run folder or a missing package (gguf for a .gguf
model, peft for model.lora), 143 (SIGTERM, or the launcher's exit) and 130 (SIGINT) for a stop by signal
with a checkpoint. See docs/finetune.md.
"""

from __future__ import annotations

import argparse
import os
import sys

PARENT_PID = os.getppid()  # read before the heavy imports: the launcher that started this process, still alive
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="experiment YAML (configs/experiments/...)")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                   help="continue from the latest checkpoint in output_dir (or from the given checkpoint folder)")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="dotted overrides, e.g. train.max_steps=20 encoding.options.strength=0.3")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from hf_trajpe.training import ConfigError, load_config
    from hf_trajpe.training.context_parallel import LaunchError
    from hf_trajpe.training.files import RunFileError
    from hf_trajpe.training.trainer import Trainer, exit_status, launcher_pid

    try:
        cfg = load_config(args.config, args.overrides)  # fails before anything is built or trained
        trainer = Trainer(cfg, resume=args.resume, watch_parent=launcher_pid(PARENT_PID)).setup()
    except (ConfigError, LaunchError, RunFileError, FileNotFoundError, FileExistsError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)  # ImportError: a package the config needs (gguf, peft)
        return 2
    try:
        reason = trainer.train()  # a stopped run is evaluated after its checkpoint
        if reason == "done":
            trainer.save_final()
        trainer.report()  # the summary; its last line says why the run stopped and the exit status
    finally:
        trainer.cleanup()
    return exit_status(reason)


if __name__ == "__main__":
    sys.exit(main())
