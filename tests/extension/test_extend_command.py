"""``hf-trajpe extend`` and ``hf_trajpe.extend`` on a tiny Llama with a byte tokenizer: the three outputs, the saved
model against the original patched with the choice, resume, the refusals; the rule and the candidates' formulas.

Kept small (a one-layer model, a few 256-token reads): the whole file is a few CPU seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as T

import hf_trajpe
from hf_trajpe.cli import main
from hf_trajpe.extension import run as extension_run
from hf_trajpe.extension.candidates import METHODS, build_candidates
from hf_trajpe.extension.report import save_model
from hf_trajpe.extension.rule import Rule, Spans
from hf_trajpe.extension.settings import largest_distance

TRAINED = 128


def _tiny_llama(max_positions: int = TRAINED):
    cfg = T.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                        bos_token_id=1, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    return T.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("extend") / "tiny"
    _tiny_llama().save_pretrained(path)
    return path


def _argv(tiny: Path, out: Path, *extra: str) -> list[str]:
    return ["extend", "--model", str(tiny), "--tokenizer", "byte", "--to", "256", "--out", str(out),
            "--methods", "yarn", "dca", "--kinds", "stdlib", "license", "--documents", "1",
            "--validation-documents", "1", "--dtype", "float32", "--bootstrap", "50", "--no-progress", *extra]


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_the_command_writes_the_model_its_record_and_report_and_the_model_is_the_choice(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_argv(tiny, out)) == 0
    screen = capsys.readouterr().out
    record = json.loads((out / "extension.json").read_text())
    assert record["status"] == "done" and f"chosen: {record['chosen']['name']}" in screen
    assert (out / "extension.md").read_text().startswith("# ")
    card = (out / "model" / "README.md").read_text()
    assert "## How to load" in card and record["rule"]["text"] in card
    assert (out / "ppl_by_window.png").read_bytes()[:4] == b"\x89PNG"
    # the record: the rule, every candidate with its settings and validation loss, the choice, costs, versions
    assert [c["name"] for c in record["candidates"]] == ["stock", "yarn", "dca"]
    assert all(c["validation"]["loss_past"] > 0 for c in record["candidates"])
    assert set(record["chosen"]) >= {"name", "encoding", "options"}
    assert set(record["test"]["methods"]) >= {"stock", "yarn", record["chosen"]["name"]}
    assert set(record["test"]["documents"]) == {"stdlib", "license"}
    assert record["costs"]["reads_cpu_seconds"] >= 0 and record["versions"]["transformers"] == T.__version__
    assert record["precision"]["dtype"] == "float32" and record["machine"]["cpu_count"] >= 1
    validation = set(record["validation"]["documents"])
    assert validation and not validation & {d for v in record["test"]["documents"].values() for d in v}
    # the saved model reads as the original patched with the choice
    ids = torch.randint(3, 259, (1, 200))
    original = _tiny_llama()
    chosen = record["chosen"]
    handle = hf_trajpe.patch(original, chosen["encoding"], **chosen["options"]) if chosen["encoding"] else None
    want = _logits(original, ids)
    loader = (T.AutoModelForCausalLM.from_pretrained if record["model"]["form"] == "transformers"
              else hf_trajpe.from_pretrained)
    torch.testing.assert_close(_logits(loader(out / "model").eval(), ids), want)
    if handle is not None:
        handle.unpatch()


@pytest.mark.parametrize("name,form", [("yarn", "transformers"), ("dca", "hf_trajpe"), ("stock", "transformers")])
def test_a_scaling_saves_as_plain_transformers_and_a_remap_as_an_hf_trajpe_save(name, form, tmp_path):
    from hf_trajpe.data import byte_tokenizer

    model = _tiny_llama()
    candidate = next(c for c in build_candidates(TRAINED, 256, ["yarn", "dca"]) if c.name == name)
    saved = save_model(model, byte_tokenizer(), candidate, tmp_path / "m")
    assert saved["form"] == form
    ids = torch.randint(3, 259, (1, 200))
    handle = hf_trajpe.patch(model, *candidate.patch_options()[:1], **candidate.patch_options()[1]) \
        if candidate.options else None
    want = _logits(model, ids)
    if handle is not None:
        handle.unpatch()
    loaded = T.AutoModelForCausalLM.from_pretrained(tmp_path / "m") if form == "transformers" \
        else hf_trajpe.from_pretrained(tmp_path / "m")
    torch.testing.assert_close(_logits(loaded.eval(), ids), want)
    if form == "transformers":
        assert not (tmp_path / "m" / "hf_trajpe_config.json").exists()


def test_the_same_command_continues_and_a_folder_of_another_run_is_refused(tiny, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    reads = []
    real = extension_run.token_nll
    monkeypatch.setattr(extension_run, "token_nll", lambda model, ids, **kw: reads.append(1) or real(model, ids, **kw))
    assert main(_argv(tiny, out)) == 0
    first = len(reads)
    assert first == 3 + 2 * len(json.loads((out / "extension.json").read_text())["test"]["methods"])
    done = json.loads((out / "extension.json").read_text())
    (out / "reads" / "validation" / "dca" / "0.json").unlink()  # as if cut short there
    reads.clear()
    capsys.readouterr()
    assert main(_argv(tiny, out)) == 0
    assert len(reads) == 1, "only the missing read is made again"
    assert "taken from" in capsys.readouterr().err
    again = json.loads((out / "extension.json").read_text())
    assert again["chosen"] == done["chosen"]
    assert again["candidates"][2]["validation"]["loss_past"] == done["candidates"][2]["validation"]["loss_past"]
    # another target, another rule: refused, naming the difference; nothing read
    reads.clear()
    assert main([*_argv(tiny, out)[:6], "320", *_argv(tiny, out)[7:]]) == 2
    err = capsys.readouterr().err
    assert "holds another extension run" in err and "target_length: 256 there, 320 here" in err
    assert main([*_argv(tiny, out), "--tolerance", "2"]) == 2
    assert "rule.tolerance_percent: 1.0 there, 2.0 here" in capsys.readouterr().err
    assert reads == []


def test_the_refusals_say_what_was_wrong_and_leave_no_folder(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _argv(tiny, out)
    assert main([*argv[:6], "128", *argv[7:]]) == 2
    assert "--to 128 is not past the trained length 128 of this model" in capsys.readouterr().err
    gpt2 = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=259, n_positions=128, n_embd=16, n_layer=1, n_head=2))
    gpt2.save_pretrained(tmp_path / "gpt2")
    assert main([*argv[:2], str(tmp_path / "gpt2"), *argv[3:]]) == 2
    err = capsys.readouterr().err
    assert "has learned positions, not rotary ones" in err and "hf_trajpe.patch swaps this model's encoding" in err
    short = tmp_path / "short.txt"
    short.write_text("x" * 96)
    assert main([*argv, "--validation", str(short)]) == 2
    assert "the validation text has 96 tokens; reading 256 tokens needs at least 256" in capsys.readouterr().err
    assert main([*argv[:10], "yarn", "longrope", *argv[12:]]) == 2
    assert "unknown method 'longrope'; methods: yarn, linear" in capsys.readouterr().err
    assert not out.exists()


def test_the_python_call_leaves_the_model_patched_with_the_choice_on_the_users_text(tmp_path):
    from hf_trajpe.data import byte_tokenizer
    from hf_trajpe.data.real_text import KINDS
    from hf_trajpe.extension.texts import test_documents

    path = next(p for _, p in KINDS["license"][0]() if len(p.read_text(errors="replace")) > 1200)
    text = tmp_path / "mine.txt"
    text.write_text(path.read_text(errors="replace"))
    model = _tiny_llama()
    result = hf_trajpe.extend(model, "byte", 512, validation=text, methods=["dca"], kinds=["stdlib"], documents=1,
                              validation_documents_count=2, ruler_prompts=1, n_resamples=20, progress=False)
    assert [d.startswith("validation text (mine.txt)") for d in result.record["validation"]["documents"]] == [True] * 2
    assert result.record["needles"]["prompts"] == 1
    assert set(result.record["needles"]["methods"]) == set(result.record["test"]["methods"])
    ids = torch.randint(3, 259, (1, 300))
    got = _logits(model, ids)
    if result.handle is not None:
        result.handle.unpatch()
    fresh = _tiny_llama()
    if result.encoding is not None:
        hf_trajpe.patch(fresh, result.encoding, **result.options)
    torch.testing.assert_close(got, _logits(fresh, ids))
    # a validation file that is one of the test documents is refused before any read
    test_doc = test_documents(byte_tokenizer(), 512, ["stdlib"], 1)["stdlib"][0]
    test_key = test_doc["source"].split(":", 1)[1]
    test_path = next(p for k, p in KINDS["stdlib"][0]() if k == test_key)
    with pytest.raises(ValueError, match="is the test document stdlib:"):
        hf_trajpe.extend(_tiny_llama(), "byte", 512, validation=test_path, methods=["dca"], kinds=["stdlib"],
                         documents=1, progress=False)


def test_reading_in_bfloat16_gives_the_model_its_own_tensors_back():
    model = _tiny_llama()
    before = {n: t.clone() for n, t in [*model.named_parameters(), *model.named_buffers()]}
    with extension_run._in_dtype(model, torch.bfloat16):
        assert next(model.parameters()).dtype == torch.bfloat16
        model(input_ids=torch.randint(3, 259, (1, 16)))
    after = dict([*model.named_parameters(), *model.named_buffers()])
    assert all(torch.equal(before[n], after[n]) and after[n].dtype == before[n].dtype for n in before)


def test_the_rule_takes_the_lowest_loss_past_among_those_close_to_stock_inside():
    def s(inside: float, past: float) -> Spans:
        return Spans(inside * 100, 100, past * 100, 100)

    rule = Rule(tolerance=1.0)
    scores = {"stock": s(2.0, 6.0), "a": s(2.0 + 0.02, 2.0), "b": s(2.0 + 0.005, 3.0), "c": s(1.9, 2.5)}
    assert rule.choose(scores) == "c", "a reads 2% worse inside the trained length: passed over"
    assert rule.choose({"stock": s(2.0, 6.0), "b": s(2.005, 3.0), "c": s(1.9, 3.0)}) == "b", "ties: the earlier"
    assert rule.choose({"stock": s(2.0, 3.0), "a": s(2.0, 3.5)}) == "stock", "nothing reads far better: stock"
    assert Rule(tolerance=5.0).choose(scores) == "a"


def test_the_candidates_follow_their_formulas():
    by_name = {c.name: c.options for c in build_candidates(8192, 16384, list(METHODS))}
    assert by_name["stock"] is None
    assert by_name["yarn"]["rope_parameters"] == {"rope_type": "yarn", "factor": 2.0,
                                                  "original_max_position_embeddings": 8192}
    assert by_name["self_extend"] == {"encoding": "self_extend", "group_size": 4, "window": 1024}
    assert largest_distance(by_name["self_extend"], 16384, 8192) < 8192
    assert largest_distance({**by_name["self_extend"], "group_size": 2}, 16384, 8192) >= 8192, "the smallest group"
    assert by_name["dca"] == {"encoding": "dca", "chunk_size": 6144, "local_window": 1024}
    assert by_name["rerope"] == {"encoding": "rerope", "window": 2048}
    assert by_name["dynamic_ntk"]["rope_parameters"] == {"rope_type": "dynamic", "factor": 1.0}
    assert by_name["dca_yarn"]["chunk_size"] == 12288 and by_name["trajectory"]["extend"] == 2.0
