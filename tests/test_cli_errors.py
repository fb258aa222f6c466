"""Failures a new user meets on the command line and in the harness API: status 2, one line naming the key, file
or package, no traceback, and no empty ``--out`` folder left behind."""

from __future__ import annotations

import builtins
import json

import pytest

from hf_trajpe.cli import main


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    import torch
    import transformers as T

    cfg = T.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("model") / "m"
    T.LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and err.strip().count("\n") == 0, err


def test_lm_eval_without_the_harness_says_what_to_install(saved_model, tmp_path, monkeypatch, capsys):
    stock_import = builtins.__import__

    def without_lm_eval(name, *args, **kwargs):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ModuleNotFoundError("No module named 'lm_eval'", name="lm_eval")
        return stock_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_lm_eval)
    out = tmp_path / "out"
    assert main(["lm-eval", "--model", str(saved_model), "--tokenizer", "byte", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "hf-trajpe lm-eval: error: lm-evaluation-harness is not installed" in err
    assert 'pip install -e ".[lm-eval]"' in err
    _no_traceback(err)
    assert not out.exists()


def test_an_unknown_patch_option_of_a_long_context_model_names_it(saved_model, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["eval", "--long-context", "64", "--model", f"x={saved_model}", "--patch", 'x={"encoding": "rope", '
            '"strenght": 0.2}', "--tokenizer", "byte", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "hf-trajpe eval: error: --patch x:" in err and "strenght" in err
    _no_traceback(err)
    assert not out.exists()


def test_unit_names_of_a_long_context_patch_are_checked_before_loading(saved_model, tmp_path, capsys):
    """Unit names pass the early check (the ids come from the model's tokenizer later); unknown ones do not."""
    out = tmp_path / "out"
    argv = ["eval", "--long-context", "64", "--model", f"x={saved_model}", "--patch", 'x={"encoding": '
            '"self_extend_units", "boundary_ids": ["line", "paragraph"]}', "--tokenizer", "byte", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "boundary_ids: units must be among line, sentence, got ['line', 'paragraph']" in err
    _no_traceback(err)
    assert not out.exists()


@pytest.mark.parametrize("command", ["eval", "lm-eval"])
def test_a_model_folder_without_config_json_says_so(command, tmp_path, capsys):
    folder = tmp_path / "weights_only"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text("{}")
    out = tmp_path / "out"
    model = ["--model", f"a={folder}"] if command == "eval" else ["--model", str(folder), "--tokenizer", "byte"]
    assert main([command, *model, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{str(folder)!r} has no config.json" in err and "save_pretrained" in err
    assert "sentencepiece" not in err and "model_type" not in err
    _no_traceback(err)
    assert not out.exists(), "no empty --out folder is left behind"


def test_a_model_that_fails_to_load_leaves_no_empty_out_folder(tmp_path, capsys):
    import transformers as T

    folder = tmp_path / "config_only"
    T.LlamaConfig(architectures=["LlamaForCausalLM"]).save_pretrained(folder)  # no weights
    out = tmp_path / "new" / "out"
    assert main(["eval", "--model", f"a={folder}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "hf-trajpe eval: error:" in err and "model.safetensors" in err
    _no_traceback(err)
    assert not (tmp_path / "new").exists(), "the folders the command made are removed again"
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "earlier.txt").write_text("x")
    assert main(["eval", "--model", f"a={folder}", "--out", str(kept)]) == 2
    assert (kept / "earlier.txt").is_file(), "a folder that was there stays, with what it held"


def test_evaluate_names_the_tasks_a_data_folder_lacks_and_what_it_holds(tmp_path):
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed: pip install -e \".[lm-eval]\"")
    from hf_trajpe.integrations import lm_eval as he
    from hf_trajpe.integrations.lm_eval_data import expand_tasks, write_task_data

    from .integrations.tiny import tiny_model

    data = write_task_data(tmp_path / "d", content_types=["random_content"], n_docs=1, tasks=["counting"], n_task=1)
    model, tok = tiny_model("rope")
    with pytest.raises(ValueError) as err:
        he.evaluate(model, tok, ["hf_trajpe_passkey", "hf_trajpe_flip_flop", "hf_trajpe_ppl_code_hierarchy"], data)
    text = str(err.value)
    assert "holds nothing for hf_trajpe_passkey, hf_trajpe_flip_flop, hf_trajpe_ppl_code_hierarchy" in text
    assert "content types random_content and tasks counting" in text and "write_task_data" in text
    assert json.loads((data / "manifest.json").read_text())["tasks"] == ["counting"]
    assert expand_tasks(["hf_trajpe_ppl", "hf_trajpe_counting"], data) == ["hf_trajpe_ppl_random_content",
                                                                          "hf_trajpe_counting"]


def test_load_model_says_a_folder_has_no_config_json(tmp_path):
    from hf_trajpe.loading import SourceError, load_model

    with pytest.raises(SourceError, match="has no config.json"):
        load_model(tmp_path)
