"""recipes/finetune.py end to end on a tiny GPT-2 (one process): resume equality, SIGTERM, faults, the
end-of-run summary, LoRA."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import hf_trajpe
from hf_trajpe.training.checkpoint import TRAINER_STATE, checkpoint_dirs

from .runs import RECIPE, TINY, descendants, env, launcher_cmd, losses, rank_summary, recipe_cmd, run_recipe, running

#: trajectory with a learnable strength, warm-up + linear decay, gradient accumulation, evaluation mid-run
RESUME = ["encoding.name=trajectory", "encoding.options={strength: 0.3, learnable_strength: true}",
          "train.max_steps=8", "schedule.warmup_steps=2", "train.gradient_accumulation_steps=2",
          "train.eval_every=4", "train.save_every=0", "train.eval_at_start=true"]


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
    # step 0 (eval_at_start) once: the resumed run does not evaluate its start again
    assert sorted(ea) == sorted(eb) and {s for s, _ in ea} == {0, 4, 8} and len(ea) == 21
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
    return json.loads((out / "eval.json").read_text())


COMMON = ["schedule.name=constant", "schedule.warmup_steps=0", "train.eval_every=0", "train.keep_last=3"]


def _start_endless(cmd: list[str], run, log_path):
    """Start ``cmd`` (a run of 100000 steps, a checkpoint every 5) in its own session; wait for step_000005."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=RECIPE.parents[1], env=env(), stdout=log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    log.close()
    deadline = time.time() + 120
    while not (run / "checkpoints" / "step_000005").exists():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert time.time() < deadline, "no checkpoint after 120 s"
        time.sleep(0.05)
    return proc


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.time() + seconds
    while any(running(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    return [p for p in pids if running(p)]


def _assert_complete_checkpoints(run) -> int:
    """Every checkpoint complete, none half-written, the last one at the last step trained; its step."""
    ckpts = checkpoint_dirs(run / "checkpoints")
    assert not list((run / "checkpoints").glob(".tmp-*")), "no half-written checkpoint may remain"
    for c in ckpts:
        names = {p.name for p in c.iterdir()}
        assert {TRAINER_STATE, "model.safetensors", "optimizer.bin", "random_states_0.pkl"} <= names
        assert not [n for n in names if n.startswith("custom_checkpoint")], "the scheduler is not pickled"
        assert "scheduler" in json.loads((c / TRAINER_STATE).read_text())
    stopped = int(ckpts[-1].name.split("_")[1])
    assert stopped >= 5
    names = [c.name for c in ckpts]
    assert "step_000005" in names or len(names) == 3, f"a checkpoint was lost: {names}"
    assert max(losses(run)) == stopped, "the last checkpoint is the last step trained"
    return stopped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")
def test_sigterm_to_the_accelerate_launcher_stops_the_trainer_with_a_checkpoint_and_resume_continues(tmp_path):
    """The documented one-process command (accelerate launch, configs/accelerate/cpu.yaml): SIGTERM to the
    launcher's PID. The launcher does not forward it; the trainer sees its parent go, checkpoints and exits."""
    run = tmp_path / "run"
    proc = _start_endless(launcher_cmd(TINY, run, *COMMON, "train.max_steps=100000", "train.save_every=5"), run,
                          tmp_path / "launch.log")
    try:
        trainers = descendants(proc.pid)
        assert trainers, "the launcher started no process"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        assert rc == -signal.SIGTERM, f"the launcher must die of SIGTERM (status 143 in a shell), got {rc}"
        left = _wait_gone(trainers, 60)
        assert not left, f"orphaned trainer process(es) {left} still running 60 s after the launcher died"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher's session: an orphan too, if the test failed
    text = (tmp_path / "launch.log").read_text()
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert f"(SIGTERM: the launcher, pid {proc.pid}, exited)" in last and last.endswith("exit status 143"), last
    stopped = _assert_complete_checkpoints(run)
    # the summary before it: the stopped model was evaluated (eval_every=0), and no final model was saved
    assert f"[hf_trajpe] summary of tiny_native: {stopped} of 100000 steps (SIGTERM)" in text, text[-3000:]
    assert f"evaluation at step {stopped} (the stopped model, evaluated after its checkpoint)" in text
    assert "model: not saved to" in text and "Removed shared tensor" not in text
    assert [e["step"] for e in _eval(run)] == [stopped]

    end = stopped + 3
    second = run_recipe(TINY, run, *COMMON, f"train.max_steps={end}", resume=True)
    assert f"at step {stopped}" in second.stdout, second.stdout[-2000:]
    ref = tmp_path / "ref"
    run_recipe(TINY, ref, *COMMON, f"train.max_steps={end}")
    diff = max_abs_diff(losses(ref), losses(run))
    print(f"SIGTERM to the launcher at step {stopped}, resumed to {end}: max |loss difference| = {diff:.3g}")
    assert diff <= 1e-6


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")
@pytest.mark.parametrize("how", ["SIGINT to the launcher", "Ctrl-C to the process group", "SIGTERM to the trainer",
                                 "SIGINT to the trainer"])
def test_every_signal_path_stops_with_a_checkpoint_and_a_signal_status(tmp_path, how):
    """About 7 s each: the other ways a run is stopped by a signal. Without a launcher the recipe's own exit
    status says which signal stopped it (143 SIGTERM, 130 SIGINT)."""
    run = tmp_path / "run"
    overrides = (*COMMON, "train.max_steps=100000", "train.save_every=5")
    launched = "launcher" in how or "group" in how
    cmd = launcher_cmd(TINY, run, *overrides) if launched else recipe_cmd(TINY, run, *overrides)
    proc = _start_endless(cmd, run, tmp_path / "launch.log")
    sig = signal.SIGTERM if "SIGTERM" in how else signal.SIGINT
    try:
        trainers = descendants(proc.pid) if launched else [proc.pid]
        if "group" in how:
            os.killpg(proc.pid, sig)  # what a terminal does on Ctrl-C
        else:
            proc.send_signal(sig)
        rc = proc.wait(timeout=60)
        assert not _wait_gone(trainers, 60), "an orphaned trainer is still running"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    text = (tmp_path / "launch.log").read_text()
    # SIGINT to the launcher alone kills it (KeyboardInterrupt); the trainer stops on the launcher's exit
    stopped_by = "SIGTERM" if how == "SIGINT to the launcher" else sig.name
    status = {"SIGTERM": 143, "SIGINT": 130}[stopped_by]
    if launched:
        assert rc == -sig, f"the launcher must die of {sig.name}, got {rc}"
    else:
        assert rc == status, f"the recipe must exit with {status} after {sig.name}, got {rc}\n{text[-2000:]}"
    lines = [line for line in text.splitlines() if line.startswith("[hf_trajpe] stopped at step")]
    assert len(lines) == 1 and f"({stopped_by}" in lines[0] and lines[0].endswith(f"exit status {status}"), text[-2000:]
    _assert_complete_checkpoints(run)


@pytest.mark.parametrize("reason,status", [("done", 0), ("stop_after", 0), ("SIGTERM", 143), ("SIGINT", 130)])
def test_the_recipe_exit_status_says_why_the_run_stopped(monkeypatch, tmp_path, reason, status):
    from hf_trajpe.training import trainer as trainer_module

    class FakeTrainer:
        def __init__(self, cfg, resume=False, watch_parent=None):
            self.watch_parent = watch_parent

        def setup(self):
            return self

        def train(self):
            return reason

        def save_final(self):
            pass

        def report(self):
            pass

        def cleanup(self):
            pass

    monkeypatch.setattr(trainer_module, "Trainer", FakeTrainer)
    assert _recipe_main()(["--config", str(TINY), f"output_dir={tmp_path}"]) == status


def _recipe_main():
    spec = importlib.util.spec_from_file_location("finetune_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _summary(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("[hf_trajpe] summary of "))
    return lines[start:]


@pytest.mark.slow  # (10 s; stopping and resuming are in the default run's SIGTERM and resume tests)
def test_the_recipe_ends_with_a_summary_stopped_and_resumed(tmp_path):
    """The summary of a stopped run (train.stop_after) and of the resumed run to the end: steps, losses,
    the evaluation per content type (of the stopped model too), where the model, checkpoint and logs are;
    the last line says why it stopped. The tiny GPT-2 ties its LM head to the embeddings: saving it says
    nothing about shared tensors."""
    out = tmp_path / "run"
    overrides = ("train.max_steps=5", "train.eval_every=0", "schedule.warmup_steps=0")
    first = run_recipe(TINY, out, *overrides, "train.stop_after=3")
    lines = _summary(first.stdout)
    assert lines[0] == "[hf_trajpe] summary of tiny_native: 3 of 5 steps (stop_after)", first.stdout
    text = "\n".join(lines)
    assert "trained 3 step(s) in" in text and "s per step, evaluation and saving excluded" in text
    assert "train loss at step 3: " in text and "(step 1: " in text
    assert "evaluation at step 3 (the stopped model, evaluated after its checkpoint): mean loss" in text
    rows = {line.split()[1]: float(line.split()[2]) for line in lines
            if line.startswith("[hf_trajpe]    ") and "content type" not in line}
    evaluated = _eval(out)
    assert [e["step"] for e in evaluated] == [3] and len(rows) == 7
    assert rows == {t: pytest.approx(v["loss"], abs=1e-4) for t, v in evaluated[0].items() if t != "step"}
    ckpt = out / "checkpoints" / "step_000003"
    assert f"model: not saved to {out / 'final'}" in text and f"checkpoint: {ckpt}" in text
    assert f"logs: {out / 'logs'} (TensorBoard), {out / 'metrics.jsonl'}, {out / 'eval.json'} (evaluations)" in text
    assert lines[-1] == (f"[hf_trajpe] stopped at step 3 (stop_after); checkpoint {ckpt}; continue with --resume; "
                         "exit status 0")
    assert "Removed shared tensor" not in first.stdout + first.stderr

    second = run_recipe(TINY, out, *overrides, resume=True)
    lines = _summary(second.stdout)
    text = "\n".join(lines)
    assert lines[0] == "[hf_trajpe] summary of tiny_native: 5 of 5 steps (done, resumed at step 3)"
    assert "trained 2 step(s) in" in text and "evaluation at step 5 (the latest evaluation)" in text
    assert f"model: {out / 'final'} (reload with hf_trajpe.from_pretrained)" in text
    assert lines[-1] == "[hf_trajpe] done at step 5; exit status 0"
    assert "Removed shared tensor" not in second.stdout + second.stderr
    print("\n".join(lines))


LORA = ["encoding.name=trajectory", "encoding.options={strength: 0.3, learnable_strength: true}", "train.max_steps=4",
        "model.lora={r: 4, lora_alpha: 8, lora_dropout: 0.0, target_modules: [c_attn], fan_in_fan_out: true}",
        "optimizer.lr=0.01", "train.eval_every=0"]


@pytest.mark.slow  # (16 s; LoRA on a patched model trains and saves in patching/test_patch_api.py, in process)
def test_lora_trains_the_adapters_and_the_strength_resumes_and_saves_a_merged_patched_model(tmp_path):
    pytest.importorskip("peft")
    out, split = tmp_path / "lora", tmp_path / "split"
    proc = run_recipe(TINY, out, *LORA)
    assert "[hf_trajpe] LoRA: " in proc.stdout and "is_gradient_checkpointing" not in proc.stderr
    summary = rank_summary(out)
    model = hf_trajpe.from_pretrained(out / "final").eval()  # no peft needed: the adapters are merged
    assert not [n for n, _ in model.named_parameters() if "lora" in n]
    handle = hf_trajpe.patching.get_handle(model)
    assert abs(float(handle.state.strength.value.detach()) - 0.3) > 1e-5, "the strength trains with the adapters"
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(summary["probe_input_ids"])).logits.double().sum()
    assert float(logits) == pytest.approx(summary["probe_logits_sum"], rel=1e-6, abs=1e-4)
    # stopped and resumed: the adapters, their optimizer state and the strength come back from the checkpoint
    run_recipe(TINY, split, *LORA, "train.stop_after=2")
    run_recipe(TINY, split, *LORA, resume=True)
    diff = max_abs_diff(losses(out), losses(split))
    print(f"LoRA resume at step 2 of 4: max |loss difference| = {diff:.3g}")
    assert diff <= 1e-6 and rank_summary(split)["probe_logits_sum"] == pytest.approx(summary["probe_logits_sum"])


@pytest.mark.parametrize("override,message", [
    (["train.max_step=5"], "'train.max_step'; did you mean 'max_steps'"),
    (["data.path=/nonexistent/content_types"], "data.path '/nonexistent/content_types' does not exist"),
    (["model.config=null", "model.path=/nonexistent/model"], "model.path '/nonexistent/model' does not exist"),
    (["model.tokenizer=/nonexistent/tok"], "model.tokenizer '/nonexistent/tok' does not exist"),
    (["model.config=null", "model.path=/nonexistent/model.gguf"], "model.path '/nonexistent/model.gguf' does not "
     "exist: give a folder saved with save_pretrained or a .gguf file"),
    (["model.lora={rank: 4}"], "model.lora.rank: not an option of peft.LoraConfig"),
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


def test_the_launcher_is_watched_only_when_a_launcher_started_the_run(monkeypatch):
    from hf_trajpe.training.trainer import LAUNCHER_ENV, launcher_pid

    for key in (*LAUNCHER_ENV, "HF_TRAJPE_STOP_WITH_PARENT"):
        monkeypatch.delenv(key, raising=False)
    assert launcher_pid(4321) is None, "a run started from a shell (nohup ... &) must outlive its shell"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")  # set by accelerate launch in its child
    assert launcher_pid(4321) == 4321 and launcher_pid(1) is None
    monkeypatch.setenv("HF_TRAJPE_STOP_WITH_PARENT", "0")
    assert launcher_pid(4321) is None
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    monkeypatch.setenv("HF_TRAJPE_STOP_WITH_PARENT", "1")
    assert launcher_pid(4321) == 4321


@pytest.mark.parametrize("override,message", [
    (["logging.project=../../TB"], "logging.project: '../../TB' is not a valid name"),
    (["logging.project={tmp}/TB"], "logging.project: '{tmp}/TB' is not a valid name"),
    (["model.config.n_layer=two"], "model.config.n_layer: expected a number, got the string 'two'"),
    (["model.config.n_embd=63"], "model.config.n_embd: 63 is not divisible by model.config.n_head"),
])
def test_a_path_out_of_output_dir_or_a_value_transformers_refuses_fails_before_any_work(tmp_path, capsys, override,
                                                                                         message):
    """Exit status 2 naming the dotted key; nothing written (no output_dir, so no .hf_trajpe.lock). The
    project paths point into tmp_path (out/logs/../../TB is tmp_path/TB), so a regression writes there."""
    out = tmp_path / "out"
    rc = _recipe_main()(["--config", str(TINY), f"output_dir={out}", *(o.format(tmp=tmp_path) for o in override)])
    assert rc == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_output_dir_that_cannot_be_created_is_said_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    rc = _recipe_main()(["--config", str(TINY), f"output_dir={blocker / 'out'}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert f"output_dir '{blocker / 'out'}' cannot be created or written" in err and "Traceback" not in err


def test_a_recipe_yaml_that_is_not_yaml_or_not_utf8_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("output_dir: [x\n")
    assert _recipe_main()(["--config", str(bad)]) == 2
    assert f"{bad}: not valid YAML" in capsys.readouterr().err
    bad.write_bytes(b"output_dir: \xff\xfe\n")
    assert _recipe_main()(["--config", str(bad)]) == 2
    assert f"{bad}: not UTF-8 text" in capsys.readouterr().err


#: a tiny Llama with a layer map: a learnable trajectory strength on two layers, NoPE and ALiBi on others; LoRA
LAYER_MAP = ["model.config={model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 4, "
             "num_attention_heads: 2, num_key_value_heads: 1, vocab_size: 259, max_position_embeddings: 256, "
             "bos_token_id: 1, eos_token_id: 1, pad_token_id: 0}",
             "encoding={layers: {'0': none, '1': {name: alibi}, 'top:2': {name: trajectory, options: {strength: 0.3, "
             "learnable_strength: true}}}}",
             "model.lora={r: 4, lora_alpha: 8, lora_dropout: 0.0, target_modules: [q_proj, v_proj]}",
             "optimizer.lr=0.01", "train.max_steps=4", "train.eval_every=0"]


@pytest.mark.slow
def test_a_layer_map_trains_with_lora_resumes_and_saves_a_reloadable_patched_model(tmp_path):
    pytest.importorskip("peft")
    out, split = tmp_path / "map", tmp_path / "split"
    run_recipe(TINY, out, *LAYER_MAP)
    summary = rank_summary(out)
    model = hf_trajpe.from_pretrained(out / "final").eval()
    handle = hf_trajpe.patching.get_handle(model)
    assert [h.layers for h in handle.handles] == [(0,), (1,), (2, 3)]
    assert abs(float(handle.handles[2].state.strength.value.detach()) - 0.3) > 1e-5, "the strength trains"
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(summary["probe_input_ids"])).logits.double().sum()
    assert float(logits) == pytest.approx(summary["probe_logits_sum"], rel=1e-6, abs=1e-4)
    run_recipe(TINY, split, *LAYER_MAP, "train.stop_after=2")
    run_recipe(TINY, split, *LAYER_MAP, resume=True)
    assert max_abs_diff(losses(out), losses(split)) <= 1e-6
