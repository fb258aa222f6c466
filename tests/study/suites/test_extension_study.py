"""The extension study: methods filled in at a factor, its config checks, the statistics of its comparisons
(checked against hand-computed values), the reads, and a minuscule study that pretrains, fine-tunes, reads a
"real" model, reports, and is resumed without training again."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from hf_trajpe.study import load_study_config, run_study
from hf_trajpe.study.suites.extension.config import ExtensionStudyConfig, method_options
from hf_trajpe.study.suites.extension.eval import adjust, compare, percent, read_losses
from hf_trajpe.training.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]
EXTENSION = str(ROOT / "configs" / "study" / "extension.yaml")


def test_methods_take_the_factor_of_each_reading():
    assert method_options(None, 4) is None and method_options({"encoding": "native"}, 4) is None
    pi = {"encoding": "rope", "rope_parameters": {"rope_type": "linear"}}
    assert method_options(pi, 4)["rope_parameters"] == {"rope_type": "linear", "factor": 4.0}
    assert "factor" not in pi["rope_parameters"]  # the config's entry is left as written
    fixed = {"encoding": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 3.0}}
    assert method_options(fixed, 8)["rope_parameters"]["factor"] == 3.0
    content = {"encoding": "trajectory", "base": "rope", "strength": 0.5, "extend": "factor"}
    assert method_options(content, 8)["extend"] == 8.0
    with pytest.raises(ValueError, match="rope_type"):
        method_options({"encoding": "rope", "rope_parameters": {"rope_type": "nope"}}, 2)
    grouped = {"encoding": "self_extend", "group_size": "2*factor", "window": 32}
    assert method_options(grouped, 4) == {"encoding": "self_extend", "group_size": 8, "window": 32}
    assert method_options({"encoding": "self_extend", "group_size": "factor"}, 2)["group_size"] == 2
    with pytest.raises(ValueError, match="group_size"):  # 1.5 x 3 is no integer
        method_options({"encoding": "self_extend", "group_size": "1.5*factor"}, 3)


def test_the_remaps_config_trains_the_extension_studys_models():
    """Same model, data, training and seeds as the extension study (its own folder: no fine-tunes)."""
    remaps = load_study_config(str(ROOT / "configs" / "study" / "extension_remaps.yaml"))
    base = load_study_config(EXTENSION)
    assert remaps.output_dir != base.output_dir and remaps.seeds == base.seeds
    assert remaps.model == base.model and remaps.data == base.data and remaps.train == base.train
    assert remaps.real is None and remaps.finetune is None


def test_extension_config_is_checked():
    cfg = load_study_config(EXTENSION)
    assert isinstance(cfg, ExtensionStudyConfig) and cfg.reference == "stock" and len(cfg.seeds) == 5
    assert cfg.model["max_position_embeddings"] == cfg.data.block_size and cfg.real is not None
    quick = load_study_config(EXTENSION, quick=True)
    assert quick.real is None and quick.output_dir != cfg.output_dir
    with pytest.raises(ConfigError, match="must equal data.block_size"):
        load_study_config(EXTENSION, overrides=["data.block_size=64"])
    with pytest.raises(ConfigError, match="finetune.methods"):
        load_study_config(EXTENSION, overrides=["finetune.methods=[stock, pii]"])
    with pytest.raises(ConfigError, match=r"methods.bad \(at factor 2\)"):
        load_study_config(EXTENSION, overrides=["methods.bad={encoding: rope, rope_parameters: {rope_type: yarn, "
                                                "beta: 1}}"])
    with pytest.raises(ConfigError, match="eval.factors"):
        load_study_config(EXTENSION, overrides=["eval.factors=[1, 2]"])


def test_compare_gives_the_t_interval_over_seeds():
    # three seeds; within a seed every sequence differs by the same amount, so the sequences add nothing
    ref = [np.full(4, 2.0)] * 3
    model = [np.full(4, 2.0 - d) for d in (0.1, 0.2, 0.3)]
    c = compare(model, ref, margin=5.0)
    se, t = 0.1 / math.sqrt(3), 4.302652729911275  # sd of (0.1, 0.2, 0.3); t(0.975, 2 df)
    assert c["value"] == pytest.approx(percent(0.2))
    assert c["ci"] == pytest.approx((percent(0.2 - t * se), percent(0.2 + t * se)), rel=1e-6)
    assert c["p_value"] == pytest.approx(0.0742, abs=1e-3)  # two-sided t tail at 0.2 / se = 3.46, 2 df
    adjust([c])
    assert c["verdict"].startswith("no significant difference")


def test_holm_takes_away_a_difference_that_one_comparison_alone_would_have():
    ref = [np.full(4, 2.0)] * 3
    clear = compare([np.full(4, 2.0 - d) for d in (0.30, 0.31, 0.32)], ref, margin=5.0)
    marginal = [compare([np.full(4, 2.0 - d) for d in (0.14, 0.2, 0.26)], ref, margin=5.0) for _ in range(2)]
    p = marginal[0]["p_value"]
    assert marginal[0]["ci"][0] > 0 and 0.025 < p < 0.05  # "better" on its own
    alone = dict(marginal[0])
    adjust([alone])
    assert alone["verdict"] == "better"
    adjust([clear, *marginal])  # Holm: the two marginal p-values are the 2nd and 3rd smallest of 3: times 2
    assert clear["verdict"] == "better" and marginal[0]["p_adjusted"] == pytest.approx(2 * p)
    assert all(m["verdict"].startswith("no significant difference") and m["correction"] == "Holm" for m in marginal)
    assert all(m["verdict_bh"] == "better" for m in marginal)  # Benjamini-Hochberg, kept beside: p stays p


def test_the_equivalence_tests_take_the_same_correction_as_the_differences():
    """Two comparisons, each equivalent within ±5% on its own (TOST p 0.03): Holm doubles both to 0.06, so
    neither is equivalent; Benjamini-Hochberg leaves them at 0.03."""
    def pair():
        return [{"value": 0.1, "p_value": 0.9, "p_equivalence": 0.03, "margin": 5.0} for _ in range(2)]

    holm_first, bh_first = pair(), pair()
    adjust(holm_first, correction="holm")
    adjust(bh_first, correction="bh")
    assert all(c["p_equivalence_holm"] == pytest.approx(0.06) for c in holm_first)
    assert all(c["verdict"] == "no significant difference; not shown equivalent within ±5%" for c in holm_first)
    assert all(c["verdict"] == "no significant difference; equivalent within ±5%" for c in bh_first)
    assert all(c["verdict_holm"] == holm_first[0]["verdict"] for c in bh_first)


def _tiny_llama(positions: int = 16):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=positions)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_read_losses_are_the_models_own_loss_and_its_part_past_the_trained_length():
    model = _tiny_llama()
    ids = torch.randint(3, 259, (3, 40))
    got = read_losses(model, ids, trained=16, batch_size=2)
    for i in range(3):
        with torch.no_grad():
            out = model(input_ids=ids[i:i + 1], labels=ids[i:i + 1])
        assert got["whole"][i] == pytest.approx(float(out.loss.detach()), rel=1e-5)
        nll = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[i, 1:], reduction="none")
        assert got["past"][i] == pytest.approx(float(nll[15:].mean()), rel=1e-5)  # tokens at positions 16..39


@pytest.mark.slow
def test_tiny_extension_study_end_to_end_and_resume(tmp_path, capsys):
    real = tmp_path / "real_model"
    _tiny_llama(positions=128).save_pretrained(real)
    overrides = [f"output_dir={tmp_path / 'runs'}", f"report_dir={tmp_path / 'report'}", "workers=1", "seeds=[0, 1]",
                 "model.num_hidden_layers=1", "model.hidden_size=32", "model.intermediate_size=64",
                 "model.num_attention_heads=2", "model.num_key_value_heads=2", "model.max_position_embeddings=16",
                 "data.block_size=16", "data.train=10", "data.test=10", "train.steps=3", "train.warmup_steps=1",
                 "train.log_every=1", "eval.factors=[2]", "eval.max_sequences=2", "finetune.methods=[stock, pi]",
                 "finetune.steps=2", "finetune.warmup_steps=0", "methods={stock: null, pi: {encoding: rope, "
                 "rope_parameters: {rope_type: linear}}, content: {encoding: trajectory, base: rope, strength: 0.5, "
                 "extend: factor}}", "comparisons=[[content, pi]]", "published=[]",
                 f"real={{model: {real}, tokenizer: byte, length: 160, kinds: [stdlib], documents: 2, "
                 "passkey_lengths: [], n_resamples: 50}"]
    cfg = load_study_config(EXTENSION, overrides=overrides)
    paths = run_study(cfg, progress=False, log=lambda m: None)
    md = paths["study_md"].read_text()
    assert "## Zero-shot: perplexity" in md and "## After fine-tuning at 2x T" in md and "## Real model" in md
    assert "zero-shot, content vs pi at 2x" in md and "| pi vs stock |" in md
    data = json.loads(paths["study_json"].read_text())
    assert {c["model"] for c in data["comparisons"]["pretrain"]} == {"pi", "content"}
    assert {c["model"] for c in data["comparisons"]["finetune"]} == {"pi"}  # content was not fine-tuned
    per_seed = data["scores"]["pretrain"]["stock"]["2"]["code_hierarchy"]["whole"]
    assert len(per_seed) == 2 and len(per_seed[0]) == 2
    assert json.loads(paths["real_json"].read_text())["trained_length"] == 128
    assert capsys.readouterr().out.strip().startswith("# Context extension study")
    logs = []
    run_study(cfg, progress=False, log=logs.append, summary=False)
    assert sum("reusing 2 trained models" in m for m in logs) == 1, logs
    assert any("reusing 4 trained models" in m for m in logs) and not any("training" in m for m in logs), logs
    assert any("reusing the real model's reads of 3 method(s)" in m for m in logs), logs  # nothing read again
    assert (tmp_path / "runs" / "reads_pretrain.pt").is_file()


def test_an_option_chosen_on_validation_reads_the_test_split_with_the_best_value(tmp_path):
    """Zero-shot and fine-tuned, per seed and factor: the value with the lowest validation loss is kept, and the
    test read is the read of that value as a fixed method (the same model, the same sequences)."""
    def content(strength: str) -> str:
        return f"{{encoding: trajectory, base: rope, extend: factor, strength: {strength}}}"

    overrides = [f"output_dir={tmp_path / 'runs'}", f"report_dir={tmp_path / 'report'}", "workers=1", "seeds=[0, 1]",
                 "model.num_hidden_layers=1", "model.hidden_size=32", "model.intermediate_size=64",
                 "model.num_attention_heads=2", "model.num_key_value_heads=2", "model.max_position_embeddings=16",
                 "data.block_size=16", "data.train=10", "data.test=10", "data.validation=10", "train.steps=3",
                 "train.warmup_steps=1", "train.log_every=1", "eval.factors=[2, 4]", "eval.max_sequences=3",
                 "eval.validation_sequences=2",
                 "finetune.methods=[chosen]", "finetune.steps=2", "finetune.warmup_steps=0",
                 f"methods={{stock: null, low: {content('0.0')}, high: {content('1.0')}, "
                 f"chosen: {content('{choose: [0.0, 1.0]}')}}}",
                 "comparisons=[[chosen, stock]]", "published=[]", "real=null"]
    cfg = load_study_config(EXTENSION, overrides=overrides)
    paths = run_study(cfg, progress=False, log=lambda m: None, summary=False)
    data = json.loads(paths["study_json"].read_text())
    scores = data["scores"]["pretrain"]
    for factor, cells in data["chosen"]["pretrain"]["chosen"].items():
        for cell in cells:
            losses = cell["validation_loss"]
            assert cell["value"] == float(min(losses, key=losses.get))
            fixed = "low" if cell["value"] == 0.0 else "high"
            for kind, per_seed in scores["chosen"][factor].items():
                assert per_seed["whole"][cell["seed"]] == scores[fixed][factor][kind]["whole"][cell["seed"]]
    assert {c["seed"] for c in data["chosen"]["finetune"]["chosen"]["4"]} == {0, 1}
    folders = sorted(p.name for p in (tmp_path / "runs" / "models" / "finetune").iterdir() if p.is_dir())
    assert folders == ["chosen_0p0_s0", "chosen_0p0_s1", "chosen_1p0_s0", "chosen_1p0_s1"]
    md = paths["study_md"].read_text()
    assert "### Zero-shot: chosen chooses strength on validation" in md and "| 4x |" in md
    assert "over 2 validation sequences per type (of 10 validation documents per type" in md


def test_a_choice_needs_validation_data_and_one_option():
    choose = "methods.c={encoding: trajectory, base: rope, extend: factor, strength: {choose: [0.1, 0.5]}}"
    with pytest.raises(ConfigError, match="set data.validation"):
        load_study_config(EXTENSION, overrides=[choose, "real=null"])
    with pytest.raises(ConfigError, match="one option may be chosen"):
        load_study_config(EXTENSION, overrides=["data.validation=10", "real=null",
                                                "methods.c={encoding: trajectory, base: rope, extend: factor, "
                                                "strength: {choose: [0.1, 0.5]}, max_step: {choose: [1, 2]}}"])
    with pytest.raises(ConfigError, match="two or more distinct values"):
        load_study_config(EXTENSION, overrides=["data.validation=10", "real=null", choose.replace("0.1, 0.5", "0.1")])
    with pytest.raises(ConfigError, match="the real model does not have"):
        load_study_config(EXTENSION, overrides=[choose, "data.validation=10", "real.methods=[stock, c]"])
    cfg = load_study_config(EXTENSION, overrides=[choose, "data.validation=10"])
    assert "c" not in cfg.real_methods() and "yarn" in cfg.real_methods()
    with pytest.raises(ConfigError, match="must include the reference"):
        load_study_config(EXTENSION, overrides=["eval.methods=[pi, yarn]"])


def test_the_content_config_chooses_the_strength_on_the_extension_studys_models():
    content = load_study_config(str(ROOT / "configs" / "study" / "extension_content.yaml"))
    base = load_study_config(EXTENSION)
    assert content.model == base.model and content.train == base.train and content.seeds == base.seeds
    assert content.data.validation > 0 and content.correction == "holm" and content.real is None
    # a study without a validation split keeps the fingerprint it had before the field existed (its models reused)
    assert "validation" not in base.fingerprint_dict()["data"] and "validation" in content.fingerprint_dict()["data"]
    assert "content_learned" not in content.zero_shot_methods() and "content_tuned" in content.zero_shot_methods()
    from hf_trajpe.study.suite import Part
    from hf_trajpe.study.suites.extension.suite import ExtensionSuite

    runs = ExtensionSuite().plan(content, Part("finetune", {"part": "finetune"}, ""), Path("/tmp/unused"))
    tuned = sorted({r.name for r in runs if r.name.startswith("content_tuned_")})
    assert tuned == ["content_tuned_0p0", "content_tuned_0p1", "content_tuned_0p25", "content_tuned_0p5",
                     "content_tuned_1p0"]
    assert {r.options["strength"] for r in runs if r.name.startswith("content_tuned_")} == {0.0, 0.1, 0.25, 0.5, 1.0}
