"""``hf-trajpe extend --finetune``: the chosen frequency scaling (for a remap, the best one) trained with PoSE on the
user's text through the accelerate recipe, then read on the same test documents; the training text of a run's own
files (``data.files``).

The command test runs the recipe once as a child process under ``accelerate launch`` (a one-layer model, two steps:
most of its cost is the child's imports).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as T

from hf_trajpe.cli import main
from hf_trajpe.extension.candidates import build_candidates, yarn_candidate
from hf_trajpe.extension.finetune import experiment_config, plan_finetune
from hf_trajpe.training.config import ConfigError, config_from_dict
from hf_trajpe.training.data import FILES_TYPE, build_run_data

TRAINED = 128


def _tiny_llama():
    cfg = T.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=TRAINED,
                        bos_token_id=1, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


def _licence_text(tmp_path: Path, chars: int = 6000) -> Path:
    from hf_trajpe.data.real_text import KINDS

    texts = [p.read_text(errors="replace") for _, p in KINDS["license"][0]()]
    path = tmp_path / "mine.txt"
    path.write_text("\n\n".join(texts)[:chars])
    return path


def test_extend_finetunes_the_best_scaling_for_a_remap_and_reads_it_beside_the_choice(tmp_path, capsys):
    model_dir = tmp_path / "tiny"
    _tiny_llama().save_pretrained(model_dir)
    text = _licence_text(tmp_path)
    out = tmp_path / "out"
    argv = ["extend", "--model", str(model_dir), "--tokenizer", "byte", "--to", "256", "--out", str(out),
            "--validation", str(text), "--validation-documents", "1", "--methods", "dca", "linear",
            "--kinds", "stdlib", "--documents", "1", "--dtype", "float32", "--bootstrap", "20", "--no-progress",
            "--threads", "1", "--finetune", "2"]
    assert main(argv) == 0
    screen = capsys.readouterr().out
    record = json.loads((out / "extension.json").read_text())
    f = record["finetune"]
    chosen = record["chosen"]["name"]
    # linear is the only frequency scaling among the candidates; yarn is read in any case: one of them is trained
    assert f["trained"] == (chosen if chosen in ("linear",) else f["trained"])
    assert f["trained"] in ("linear", "yarn") and f["name"] == f["trained"] + "+pose" and f["steps"] == 2
    if chosen != f["trained"]:
        assert "PoSE cannot train" in f["why"] or "kept the model as it is" in f["why"]
    assert f"fine-tune: {f['name']}, 2 steps" in screen
    assert f["text"] == [str(text.resolve())]
    assert [p["step"] for p in f["curve"]] == [0, 2] and f["curve"][0]["text"] == FILES_TYPE
    # the tuned model reads the same test documents, and reads them otherwise than its untuned scaling
    tuned = record["test"]["methods"][f["name"]]
    assert tuned["options"] == next(c["options"] for c in record["candidates"] + [
        {"name": "yarn", "options": yarn_candidate(TRAINED, 256).options}] if c["name"] == f["trained"])
    assert len(tuned["windows"]["stdlib"]) == len(record["test"]["methods"]["stock"]["windows"]["stdlib"])
    assert f"Fine-tune: {f['name']}" in (out / "extension.md").read_text()
    saved = json.loads((out / "finetune" / "experiment.json").read_text())
    assert saved["pose"] == {"target_length": 256, "chunks": 2} and saved["data"]["files"] == f["text"]
    assert (Path(f["model"]) / "config.json").is_file()
    # the same command takes the finished fine-tune and every read as they are
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "is done; taken as it is" in err and "fine-tuning:" not in err
    # other fine-tune settings in the same folder are refused, naming the difference, once it has trained
    assert main([*argv[:-1], "3"]) == 2
    assert "holds another fine-tune (train.max_steps: 2 there, 3 here" in capsys.readouterr().err
    tag = f["config_id"]
    assert (out / "reads" / f"tuned-{tag}").is_dir() and not (out / "reads" / "test" / f["name"]).exists()


def test_a_first_start_that_trained_nothing_is_replaced_and_a_stopped_one_is_said(tmp_path, monkeypatch):
    from hf_trajpe.extension import finetune

    folder = tmp_path / "ft"
    cfg = {"output_dir": str(tmp_path / "run"), "train": {"max_steps": 2}}
    folder.mkdir()
    (folder / "experiment.json").write_text(json.dumps({**cfg, "train": {"max_steps": 9}}))
    monkeypatch.setattr(finetune, "recipe_command", lambda *a, **k: ["python", "-m", "true"])
    monkeypatch.setattr(finetune.subprocess, "run", lambda *a, **k: type("Done", (), {"returncode": 0})())
    logged = []
    with pytest.raises(finetune.FinetuneError, match="stopped before its end"):
        finetune.run_finetune(folder, cfg, log=logged.append)
    assert "never saved a step; replaced by this one" in logged[0]
    assert json.loads((folder / "experiment.json").read_text()) == cfg


def test_the_finetune_trains_the_chosen_scaling_else_the_best_one_never_dynamic_ntk():
    cands = build_candidates(TRAINED, 512, ["yarn", "linear", "dynamic_ntk", "dca"])
    by = {c.name: c for c in cands}
    yarn = yarn_candidate(TRAINED, 512)
    assert plan_finetune(cands, by["linear"], {}, yarn).candidate.name == "linear"
    plan = plan_finetune(cands, by["dca"], {"stock": 3.0, "yarn": 2.5, "linear": 2.2, "dynamic_ntk": 1.0,
                                            "dca": 2.0}, yarn)
    assert plan.candidate.name == "linear" and "dca is a remap, which PoSE cannot train" in plan.why
    plan = plan_finetune(cands, by["dynamic_ntk"], {"yarn": 2.5, "linear": 2.6, "dynamic_ntk": 1.0}, yarn)
    assert plan.candidate.name == "yarn" and "rescales its frequencies" in plan.why
    plan = plan_finetune(cands[:1] + [by["dca"]], by["stock"], {"stock": 1.0, "dca": 2.0}, yarn)
    assert plan.candidate is yarn and plan.name == "yarn+pose" and "kept the model as it is" in plan.why


def test_a_bad_finetune_override_is_refused_with_the_recipes_message(tmp_path):
    plan = plan_finetune(build_candidates(TRAINED, 256, ["yarn"]), yarn_candidate(TRAINED, 256), {},
                         yarn_candidate(TRAINED, 256))
    kwargs = dict(source=str(tmp_path), tokenizer_source="byte", run_dir=tmp_path / "run", trained=TRAINED,
                  target=256, files=None, dtype="float32", seed=0)
    cfg = experiment_config(plan, 10, **kwargs)
    assert cfg["encoding"] == {"name": "rope", "options": {"rope_parameters": yarn_candidate(TRAINED, 256).options[
        "rope_parameters"]}} and cfg["data"]["block_size"] == TRAINED
    assert experiment_config(plan, 10, **kwargs, overrides=["optimizer.lr=1e-4"])["optimizer"]["lr"] == 1e-4
    with pytest.raises(ConfigError, match="optimizer.lrr"):
        experiment_config(plan, 10, **kwargs, overrides=["optimizer.lrr=1e-4"])


def test_a_runs_own_files_are_trained_on_with_the_last_blocks_held_out(tmp_path):
    from hf_trajpe.data import byte_tokenizer

    text = _licence_text(tmp_path, chars=2000)
    base = {"output_dir": str(tmp_path / "run"), "model": {"config": {"model_type": "llama"}}}
    cfg = config_from_dict(base | {"data": {"files": [str(tmp_path)], "block_size": 100, "eval_blocks": 3}})
    data = build_run_data(cfg.data, byte_tokenizer(), "clm")
    assert data.content_types == [FILES_TYPE] and data.eval_blocks[FILES_TYPE].shape == (3, 100)
    n = data.train.shape[0] + 3
    stream = torch.cat([data.train, data.eval_blocks[FILES_TYPE]]).flatten()
    want = byte_tokenizer()(text.read_text().strip(), add_special_tokens=False)["input_ids"][:n * 100]
    assert stream.tolist() == want  # in order, the held-out blocks last
    with pytest.raises(ValueError, match="give more text"):
        build_run_data(config_from_dict(base | {"data": {"files": [str(text)], "block_size": 1000,
                                                         "eval_blocks": 2}}).data, byte_tokenizer(), "clm")
    with pytest.raises(ConfigError, match="data.files is your own text"):
        config_from_dict(base | {"data": {"files": [str(text)], "content_types": ["code"]}})


def test_the_refusals_of_the_finetune_options(tmp_path, capsys, monkeypatch):
    argv = ["extend", "--model", str(tmp_path), "--to", "2x", "--out", str(tmp_path / "out")]
    assert main([*argv, "--finetune-set", "optimizer.lr=1e-4"]) == 2
    assert "--finetune-set applies to the fine-tune: give --finetune STEPS too" in capsys.readouterr().err
    assert main([*argv, "--accelerate-config", str(tmp_path)]) == 2
    assert "--accelerate-config applies to the fine-tune" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main([*argv, "--finetune", "5"]) == 2
    assert "runs in one process" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_model_built_in_python_is_saved_for_the_recipe_and_a_folder_is_named_as_it_is(tmp_path):
    from hf_trajpe.data import byte_tokenizer
    from hf_trajpe.extension.finetune import FinetunePlan
    from hf_trajpe.extension.run import _finetune_config

    plan = FinetunePlan(yarn_candidate(TRAINED, 256), "")
    args = (plan, 4, tmp_path / "out")
    rest = dict(trained=TRAINED, target=256, validation=None, dtype_name="float32", seed=0, overrides=())
    cfg = _finetune_config(*args, None, None, **rest, model=_tiny_llama(), tokenizer=byte_tokenizer())
    base = tmp_path / "out" / "finetune" / "base"
    assert cfg["model"]["path"] == str(base) and (base / "config.json").is_file()
    assert cfg["data"]["content_types"] == ["real_text"]
    cfg = _finetune_config(*args, str(base), "byte", **rest)
    assert cfg["model"] == {"path": str(base.resolve()), "task": "clm", "tokenizer": "byte"}
