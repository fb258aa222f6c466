"""recipes/finetune.py end to end on a tiny GPT-2 (one process): resume equality, SIGTERM, faults."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import time

import pytest
import torch

import hf_trajpe
from hf_trajpe.training.checkpoint import TRAINER_STATE, checkpoint_dirs

from .runs import RECIPE, TINY, env, losses, rank_summary, recipe_cmd, run_recipe

#: trajectory with a learnable strength, warm-up + linear decay, gradient accumulation, evaluation mid-run
RESUME = ["encoding.name=trajectory", "encoding.options={strength: 0.3, learnable_strength: true}",
          "train.max_steps=8", "schedule.warmup_steps=2", "train.gradient_accumulation_steps=2",
          "train.eval_every=4", "train.save_every=0"]


def max_abs_diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b), f"different logged steps: {sorted(a)} vs {sorted(b)}"
    return max(abs(a[k] - b[k]) for k in a)


def test_resumed_run_has_the_uninterrupted_loss_curve_and_saves_a_reloadable_model(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    run_recipe(TINY, full, *RESUME)
    first = run_recipe(TINY, split, *RESUME, "train.stop_after=4")
    assert "stopped at step 4 (stop_after)" in first.stdout
    assert [p.name for p in checkpoint_dirs(split / "checkpoints")] == ["step_000004"]
    assert not (split / "final").exists()
    assert sorted(losses(split)) == [1, 2, 3, 4]
    second = run_recipe(TINY, split, *RESUME, resume=True)
    assert "resumed from" in second.stdout and "at step 4" in second.stdout

    a, b = losses(full), losses(split)
    assert sorted(a) == list(range(1, 9))
    diff = max_abs_diff(a, b)
    print(f"resume equality: max |loss difference| over {len(a)} steps = {diff:.3g}")
    assert diff <= 1e-6
    assert a[8] < a[1], "the loss must fall"
    ea = {(e["step"], t): v["loss"] for e in _eval(full) for t, v in e.items() if t != "step"}
    eb = {(e["step"], t): v["loss"] for e in _eval(split) for t, v in e.items() if t != "step"}
    assert sorted(ea) == sorted(eb) and {s for s, _ in ea} == {4, 8} and len(ea) == 14
    assert max_abs_diff(ea, eb) <= 1e-6

    # the final model reloads with its patch (learnable strength included) and gives the same outputs
    summary = rank_summary(split)
    model = hf_trajpe.from_pretrained(split / "final").eval()
    handle = hf_trajpe.patching.get_handle(model)
    assert handle.config.encoding == "trajectory" and handle.config.learnable_strength
    assert abs(float(handle.state.strength.value.detach()) - 0.3) > 1e-5, "the trained strength must be saved"
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(summary["probe_input_ids"])).logits.double().sum()
    assert float(logits) == pytest.approx(summary["probe_logits_sum"], rel=1e-6, abs=1e-4)


def _eval(out):
    import json

    return json.loads((out / "eval.json").read_text())


def test_sigterm_saves_a_checkpoint_and_the_resumed_curve_matches(tmp_path):
    run = tmp_path / "run"
    common = ["schedule.name=constant", "schedule.warmup_steps=0", "train.eval_every=0", "train.keep_last=3"]
    proc = subprocess.Popen(recipe_cmd(TINY, run, *common, "train.max_steps=100000", "train.save_every=5"),
                            cwd=RECIPE.parents[1], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 120
        while not (run / "checkpoints" / "step_000005").exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.time() < deadline, "no checkpoint after 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "(SIGTERM)" in out
    ckpts = checkpoint_dirs(run / "checkpoints")
    assert not list((run / "checkpoints").glob(".tmp-*")), "no half-written checkpoint may remain"
    for c in ckpts:  # every checkpoint is complete
        assert {TRAINER_STATE, "model.safetensors", "optimizer.bin", "random_states_0.pkl"} <= {
            p.name for p in c.iterdir()}
    stopped = int(ckpts[-1].name.split("_")[1])
    assert stopped >= 5
    names = [c.name for c in ckpts]
    assert "step_000005" in names or len(names) == 3, f"a checkpoint was lost: {names}"
    assert max(losses(run)) == stopped, "the last checkpoint is the last step trained"

    end = stopped + 3
    run_recipe(TINY, run, *common, f"train.max_steps={end}", resume=True)
    ref = tmp_path / "ref"
    run_recipe(TINY, ref, *common, f"train.max_steps={end}")
    diff = max_abs_diff(losses(ref), losses(run))
    print(f"SIGTERM at step {stopped}, resumed to {end}: max |loss difference| = {diff:.3g}")
    assert diff <= 1e-6


def _recipe_main():
    spec = importlib.util.spec_from_file_location("finetune_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize("override,message", [
    (["train.max_step=5"], "'train.max_step'; did you mean 'max_steps'"),
    (["data.path=/nonexistent/content_types"], "data.path '/nonexistent/content_types' does not exist"),
    (["model.config=null", "model.path=/nonexistent/model"], "model.path '/nonexistent/model' does not exist"),
    (["model.tokenizer=/nonexistent/tok"], "model.tokenizer '/nonexistent/tok' does not exist"),
])
def test_bad_config_or_path_fails_before_training_with_a_clear_message(tmp_path, capsys, override, message):
    out = tmp_path / "out"
    rc = _recipe_main()(["--config", str(TINY), f"output_dir={out}", *override])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not out.exists(), "nothing may be written before the config and paths are checked"


def test_existing_checkpoints_need_resume(tmp_path, capsys):
    (tmp_path / "checkpoints" / "step_000002").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_000002" / TRAINER_STATE).write_text('{"step": 2}')
    rc = _recipe_main()(["--config", str(TINY), f"output_dir={tmp_path}"])
    assert rc == 2 and "pass --resume" in capsys.readouterr().err
