"""TRL's SFTTrainer on a patched tiny model: trains, saves, reloads patched (full and with a LoRA adapter)."""

from __future__ import annotations

import pytest

from .tiny import tiny_model


def _sft(model, tok, out, peft_config=None, steps: int = 3):
    trl = pytest.importorskip("trl", reason="TRL is not installed: pip install -e \".[trl]\"")
    import datasets

    from hf_trajpe.data import build_dataset

    texts = build_dataset("dialogue_structure", train=0, validation=0, test=8, seed=0, min_chars=200)["test"]["text"]
    # bf16=False: SFTConfig's default bf16 makes accelerate wrap model.forward in a bfloat16 autocast that
    # stays on the trained object, so its logits would differ from the float32 reload by ~0.2
    args = trl.SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-2,
                         max_length=128, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
                         bf16=False, dataloader_num_workers=0, seed=0)
    trainer = trl.SFTTrainer(model=model, args=args, processing_class=tok, peft_config=peft_config,
                             train_dataset=datasets.Dataset.from_dict({"text": texts}))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, losses


def _logits(model):
    import torch

    ids = torch.arange(3, 67).view(1, -1)
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_sft_trains_a_patched_model_saves_and_reloads_patched(tmp_path):
    import torch

    import hf_trajpe

    model, tok = tiny_model("trajectory")
    before = _logits(model)
    trainer, losses = _sft(model, tok, tmp_path / "run")
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert hf_trajpe.get_handle(trainer.model) is not None, "the trainer kept the patch"
    after = _logits(trainer.model.eval())
    assert not torch.allclose(before, after), "SFT changed the weights"
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "hf_trajpe_config.json").is_file()
    reloaded = hf_trajpe.from_pretrained(tmp_path / "final").eval()
    assert hf_trajpe.get_handle(reloaded).config.encoding == "trajectory"
    torch.testing.assert_close(_logits(reloaded), after, rtol=1e-5, atol=1e-5)


def test_sft_with_a_lora_adapter_saves_the_adapter_and_a_merged_patched_model(tmp_path):
    import torch

    import hf_trajpe

    peft = pytest.importorskip("peft", reason="LoRA needs peft: pip install -e \".[trl]\"")
    model, tok = tiny_model("alibi")
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    trainer, losses = _sft(model, tok, tmp_path / "run", peft_config=lora)
    assert len(losses) == 3
    trainer.save_model(str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    peft_model = trainer.model.eval()
    frozen = {n.replace(".base_layer", ""): p for n, p in peft_model.get_base_model().named_parameters()}
    assert all(torch.equal(frozen[n], p) for n, p in base.items()), "LoRA leaves the base weights alone"
    adapted = _logits(peft_model)
    merged = peft_model.merge_and_unload()
    assert hf_trajpe.get_handle(merged) is not None
    merged.save_pretrained(tmp_path / "merged")
    reloaded = hf_trajpe.from_pretrained(tmp_path / "merged").eval()
    assert hf_trajpe.get_handle(reloaded).config.encoding == "alibi"
    torch.testing.assert_close(_logits(reloaded), adapted, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(_logits(reloaded), _logits(tiny_model("alibi")[0]), atol=1e-4), "the adapter trained"


def test_sft_trains_a_layer_map_with_gradient_checkpointing(tmp_path):
    """SFTConfig checkpoints activations by default (non-reentrant): a layer map with trajectory positions, whose
    layers replay their forward in the backward, trains as without checkpointing."""
    import torch

    import hf_trajpe

    layer_map = {"0": {"encoding": "trajectory", "base": "rope", "strength": 0.2}, "1": "alibi"}
    model, tok = tiny_model(layer_map)
    trainer, losses = _sft(model, tok, tmp_path / "run", steps=2)
    assert trainer.args.gradient_checkpointing, "TRL's default is still to checkpoint"
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    handle = hf_trajpe.get_handle(trainer.model)
    assert [c.encoding for c in handle.configs] == ["trajectory", "alibi"]
    plain, _ = tiny_model(layer_map)
    assert not torch.allclose(_logits(trainer.model.eval()), _logits(plain.eval())), "SFT changed the weights"
