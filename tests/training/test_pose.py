"""PoSE: the sampler against a reference written from the paper, the determinism of the draws, the
patched and unpatched forwards, the refusals, the config section and a recipe run."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM

import hf_trajpe
from hf_trajpe.training.config import ConfigError, config_from_dict
from hf_trajpe.training.pose import (
    PoSECollator,
    check_pose_model,
    pose_batch,
    pose_generator,
    pose_position_ids,
    skipped_positions,
)

from .runs import TINY, losses, run_recipe


def reference_ids(length: int, target: int, chunks: int, gen: torch.Generator) -> torch.Tensor:
    """PoSE as the paper writes it (section 3.2), with the reference code's choices: chunk ``i`` holds
    ``st_i + u_i ... st_i + l_i - 1 + u_i``; ``u_0 = 0``, ``u_i ~ U{u_(i-1) .. target - length}``; a chunk's
    length ``~ U{1 .. ceil(left / chunks left)}`` (two chunks: ``randint(1, (L + 1) // 2)``), the last takes
    the rest. Lengths are drawn before skips, each with ``torch.randint`` over the closed range."""
    if target == length:
        return torch.arange(length)
    sizes, left = [], length
    for k in range(chunks, 1, -1):
        sizes.append(int(torch.randint(1, (left + k - 1) // k + 1, (1,), generator=gen)))
        left -= sizes[-1]
    sizes.append(left)
    u = [0]
    for _ in range(chunks - 1):
        u.append(int(torch.randint(u[-1], target - length + 1, (1,), generator=gen)))
    out, start = [], 0
    for size, skip in zip(sizes, u, strict=True):
        out.extend(range(start + skip, start + size + skip))
        start += size
    return torch.tensor(out)


def chunks_of(ids: torch.Tensor) -> list[torch.Tensor]:
    """The runs of consecutive ids."""
    cut = (torch.nonzero(ids.diff() != 1).flatten() + 1).tolist()
    return list(torch.tensor_split(ids, cut))


@pytest.mark.parametrize("length,target,chunks", [(16, 64, 2), (16, 64, 3), (10, 11, 2), (8, 40, 8), (32, 32, 2)])
def test_sampler_matches_the_reference_and_its_properties(length, target, chunks):
    gen, ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(300):
        ids = pose_position_ids(length, target, chunks, gen)
        assert torch.equal(ids, reference_ids(length, target, chunks, ref))
        assert ids.dtype == torch.int64 and ids.shape == (length,)
        assert int(ids[0]) == 0 and int(ids[-1]) < target
        assert bool((ids.diff() > 0).all()), "ids rise strictly"
        runs = chunks_of(ids)
        assert len(runs) <= chunks  # (two skips of 0 merge chunks)
        if chunks == 2 and len(runs) == 2:  # the first chunk holds 1 .. ceil(L / 2) tokens
            assert 1 <= len(runs[0]) <= (length + 1) // 2


def test_two_chunks_reach_every_relative_distance_of_the_target():
    length, target = 8, 32
    gen = torch.Generator().manual_seed(0)
    seen: set[int] = set()
    for _ in range(2000):
        ids = pose_position_ids(length, target, 2, gen)
        seen |= set((ids[:, None] - ids[None, :]).flatten().tolist())
    assert {d for d in seen if d >= 0} == set(range(target))


def test_equal_lengths_give_arange_and_bad_arguments_are_refused():
    assert torch.equal(pose_position_ids(37, 37, 3, torch.Generator()), torch.arange(37))
    for args, text in [((0, 4, 2), "at least one token"), ((8, 4, 2), "target_length"), ((4, 8, 5), "chunks")]:
        with pytest.raises(ValueError, match=text):
            pose_position_ids(*args)


def test_draws_are_a_function_of_seed_rank_and_index():
    def draw(seed, rank, index):
        return pose_batch(4, 16, 256, 2, pose_generator(seed, rank, index))

    assert torch.equal(draw(1, 0, 7), draw(1, 0, 7))  # a resumed run draws what the uninterrupted one did
    assert not torch.equal(draw(1, 0, 7), draw(1, 1, 7))  # two processes draw their own
    assert not torch.equal(draw(1, 0, 7), draw(1, 0, 8))
    assert not torch.equal(draw(1, 0, 7), draw(2, 0, 7))


def tiny_llama() -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.5)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def loss_and_grads(model, handle, tokens, ids=None):
    model.zero_grad(set_to_none=True)
    if ids is None:
        loss = model(input_ids=tokens, labels=tokens, use_cache=False).loss
    else:
        with skipped_positions(model, handle, ids) as extra:
            loss = model(input_ids=tokens, labels=tokens, use_cache=False, **extra).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("encoding,options", [(None, {}), ("native", {}), ("trajectory", {"strength": 0.3}),
                                              ("rope", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}),
                                              ("rope", {"layers": [1]})])
def test_training_step_at_the_window_length_is_bit_identical_and_skips_change_it(encoding, options):
    model = tiny_llama()
    handle = hf_trajpe.patch(model, encoding, **options) if encoding else None
    check_pose_model(model, handle, 128)
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    plain_loss, plain_grads = loss_and_grads(model, handle, tokens)
    same = pose_batch(2, 16, 16, 2, pose_generator(0, 0, 0))
    loss, grads = loss_and_grads(model, handle, tokens, same)
    assert torch.equal(loss, plain_loss)
    assert all(torch.equal(grads[n], plain_grads[n]) for n in plain_grads)
    skipped = pose_batch(2, 16, 128, 2, pose_generator(0, 0, 0))
    assert not torch.equal(loss_and_grads(model, handle, tokens, skipped)[0], plain_loss)
    if handle is not None:
        assert all(h.state.position_skips is None for h in getattr(handle, "handles", [handle]))


def test_a_patched_rope_model_runs_at_the_ids_of_the_unpatched_one():
    model = tiny_llama()
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    ids = pose_batch(2, 16, 128, 3, pose_generator(3, 0, 0))
    with torch.no_grad():
        stock = model(input_ids=tokens, position_ids=ids, attention_mask=torch.ones_like(tokens)).logits
        patched = copy.deepcopy(model)
        handle = hf_trajpe.patch(patched, "rope")
        with skipped_positions(patched, handle, ids) as extra:
            ours = patched(input_ids=tokens, **extra).logits
    torch.testing.assert_close(ours, stock, rtol=0, atol=1e-5)


@pytest.mark.parametrize("encoding,reason", [("alibi", "linear bias"), ("none", "no positions"),
                                             ("cope", "counted from the content")])
def test_encodings_without_position_ids_are_refused_with_the_reason(encoding, reason):
    model = tiny_llama()
    handle = hf_trajpe.patch(model, encoding)
    with pytest.raises(ValueError, match=f"pose: .*{encoding}.*{reason}"):
        check_pose_model(model, handle, 128)


def test_a_layer_map_trains_when_one_of_its_encodings_reads_position_ids():
    from hf_trajpe.patching.layer_map import LayerMap

    model = tiny_llama()
    check_pose_model(model, hf_trajpe.patch(model, LayerMap.from_spec({"0": {"encoding": "none"},
                                                                        "1": {"encoding": "rope"}})), 128)
    model = tiny_llama()
    handle = hf_trajpe.patch(model, LayerMap.from_spec({"0": {"encoding": "none"}, "1": {"encoding": "alibi"}}))
    with pytest.raises(ValueError, match="pose: .*'none' encoding"):
        check_pose_model(model, handle, 128)


def test_a_learned_table_shorter_than_the_target_is_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=64))
    check_pose_model(model, None, 64)  # the model as built reads its own table
    with pytest.raises(ValueError, match=r"pose.target_length \(65\).*'learned'.*64 positions"):
        check_pose_model(model, None, 65)
    handle = hf_trajpe.patch(model, "native")
    check_pose_model(model, handle, 64)
    with pytest.raises(ValueError, match=r"pose.target_length \(65\).*64 positions"):
        check_pose_model(model, handle, 65)


def test_collator_adds_reproducible_ids_per_rank():
    def base(features):
        return {"input_ids": torch.tensor([f["input_ids"] for f in features])}

    features = [{"input_ids": list(range(12))}] * 3
    a, b, other = (PoSECollator(base, 48, seed=2, rank=r) for r in (0, 0, 1))
    first = a(features)
    assert first["position_ids"].shape == (3, 12) and torch.equal(first["attention_mask"], torch.ones(3, 12).long())
    assert torch.equal(first["position_ids"], b(features)["position_ids"])
    assert not torch.equal(first["position_ids"], other(features)["position_ids"])
    assert not torch.equal(a(features)["position_ids"], first["position_ids"])  # the next batch draws again
    assert int(first["position_ids"].max()) < 48
    with pytest.raises(ValueError, match="chunks must be >= 2"):
        PoSECollator(base, 48, chunks=1)
    with pytest.raises(ValueError, match="longer than target_length"):
        PoSECollator(base, 8)(features)


@pytest.mark.parametrize("option,value", [("chunks", 2.5), ("chunks", "2"), ("chunks", True), ("target_length", 48.0),
                                          ("seed", 0.5), ("rank", "0")])
def test_collator_options_that_are_not_integers_are_refused_by_name(option, value):
    with pytest.raises(ValueError, match=f"^{option} must be an integer.*got {value!r}"):
        PoSECollator(lambda f: f, **{"target_length": 48, option: value})


def _stack(features):
    return {"input_ids": torch.stack(features)}


def loader_ids(collator, workers: int, epochs: int = 2, reseed: bool = False) -> list[torch.Tensor]:
    """The ids of every batch of ``epochs`` passes over 5 batches of 2 rows (not a multiple of 2 workers);
    ``reseed``: the torch RNG seeded alike before each pass (the workers' base seed repeats)."""
    from torch.utils.data import DataLoader

    rows = [torch.zeros(8, dtype=torch.long)] * 10
    loader = DataLoader(rows, batch_size=2, collate_fn=collator, num_workers=workers,
                        multiprocessing_context="fork" if workers else None)
    out = []
    for _ in range(epochs):
        if reseed:
            torch.manual_seed(0)
        out.extend(batch["position_ids"] for batch in loader)
    return out


@pytest.mark.parametrize("reseed", [False, True])
def test_a_loader_with_workers_draws_what_one_without_draws_epoch_after_epoch(reseed):
    plain = loader_ids(PoSECollator(_stack, 64, seed=3, rank=0), 0)
    assert all(torch.equal(ids, pose_batch(2, 8, 64, 2, pose_generator(3, 0, i))) for i, ids in enumerate(plain))
    workers = loader_ids(PoSECollator(_stack, 64, seed=3, rank=0), 2, reseed=reseed)
    assert len(workers) == len(plain) == 10
    assert all(torch.equal(a, b) for a, b in zip(workers, plain, strict=True))  # the second epoch draws anew
    assert len({tuple(ids.flatten().tolist()) for ids in workers}) == 10


def test_a_copy_of_the_collator_counts_on_its_own():
    import pickle

    collator = PoSECollator(_stack, 64, seed=3, rank=0)
    first = collator([torch.zeros(8, dtype=torch.long)] * 2)["position_ids"]
    for twin in (copy.deepcopy(collator), pickle.loads(pickle.dumps(collator))):
        assert not torch.equal(twin([torch.zeros(8, dtype=torch.long)] * 2)["position_ids"], first)  # batch 1
    assert torch.equal(collator([torch.zeros(8, dtype=torch.long)] * 2)["position_ids"],
                       pose_batch(2, 8, 64, 2, pose_generator(3, 0, 1)))  # the copies did not advance it


BASE = {"output_dir": "x", "model": {"config": {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2}},
        "data": {"block_size": 64}}


@pytest.mark.parametrize("pose,text", [({"target_length": 32}, r"pose.target_length \(32\) must be >= data.block_size"),
                                       ({"target_length": 256, "chunks": 1}, "pose.chunks must be >= 2"),
                                       ({"target_length": 256, "chunks": 65}, r"pose.chunks \(65\)"),
                                       ({"target_length": "long"}, "pose.target_length: expected an integer"),
                                       ({"chunks": 2}, r"missing config key\(s\) \['pose.target_length'\]"),
                                       ({"target_length": 256, "chunk": 2}, "unknown config key 'pose.chunk'")])
def test_config_section_errors_name_the_key(pose, text):
    with pytest.raises(ConfigError, match=text):
        config_from_dict({**BASE, "pose": pose})


def test_config_section_is_saved_only_when_given(tmp_path):
    assert "pose" not in config_from_dict(BASE).to_dict()
    cfg = config_from_dict({**BASE, "pose": {"target_length": 256}})
    cfg.save(tmp_path / "c.yaml")
    assert yaml.safe_load((tmp_path / "c.yaml").read_text())["pose"] == {"target_length": 256, "chunks": 2}


def test_recipe_trains_with_pose_and_refuses_alibi(tmp_path):
    run = ["encoding.name=rope", "encoding.options={}", "train.max_steps=3", "pose={target_length: 512, chunks: 3}"]
    run_recipe(TINY, tmp_path / "pose", *run)
    assert sorted(losses(tmp_path / "pose")) == [1, 2, 3]
    saved = yaml.safe_load((tmp_path / "pose" / "config.yaml").read_text())
    assert saved["pose"] == {"target_length": 512, "chunks": 3}
    refused = run_recipe(TINY, tmp_path / "alibi", "encoding.name=alibi", "train.max_steps=1",
                         "pose.target_length=512", check=False)
    assert refused.returncode == 2, refused.stderr  # a config error, said in one line
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]
    assert refused.stderr.startswith("error: ") and "pose: PoSE trains on skipped position ids, and the 'alibi' " \
        "encoding (bias) gets nothing" in refused.stderr


BASE_POSE = {**BASE, "pose": {"target_length": 256}}


@pytest.mark.parametrize("encoding,text", [
    ({"name": "alibi"}, "'alibi' encoding \\(bias\\) gets nothing"),
    ({"name": "none"}, "'none' encoding \\(nothing\\)"),
    ({"name": "trajectory", "options": {"base": "alibi"}}, "'alibi' encoding \\(bias\\)"),
    ({"name": "self_extend"}, "'self_extend' encoding \\(remap\\) gets nothing.*apply the remap to the tuned model"),
    ({"layers": {"0": "rope", "1": "string"}}, "'string' encoding \\(remap\\) at encoding.layers.1 gets nothing"),
    ({"layers": {"0": "alibi", "1": {"name": "none"}}}, "'alibi' encoding \\(bias\\)")])
def test_what_the_config_alone_decides_is_refused_when_it_is_read(encoding, text):
    with pytest.raises(ConfigError, match=f"^pose: PoSE trains on skipped position ids, and the {text}"):
        config_from_dict({**BASE_POSE, "encoding": encoding})


@pytest.mark.parametrize("encoding", [None, {"name": "native"}, {"name": "trajectory"}, {"layers": {"0": "native",
                                                                                                      "1": "none"}}])
def test_what_the_model_decides_passes_the_config(encoding):
    config_from_dict({**BASE_POSE, "encoding": encoding})  # (checked against the model once it is built)


def test_a_remap_inside_a_layer_map_is_refused_naming_its_layers():
    from hf_trajpe.patching.layer_map import LayerMap

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128))
    handle = hf_trajpe.patch(model, LayerMap.from_spec({"0-1": {"encoding": "self_extend", "group_size": 2,
                                                                "window": 16}, "2": {"encoding": "rope"}}))
    with pytest.raises(ConfigError, match="'self_extend' encoding \\(remap\\) on layers 0, 1 gets nothing"):
        check_pose_model(model, handle, 256)


def test_what_the_model_decides_is_refused_before_the_data_is_built(tmp_path, monkeypatch):
    """A learned table shorter than the target (GPT-2's own, 256 rows): a one-line config error from the
    trainer's setup, before any data is built."""
    from hf_trajpe.training import load_config
    from hf_trajpe.training import trainer as trainer_module

    from .runs import FAST

    def no_data(*args, **kwargs):
        raise AssertionError("the data was built before the refusal")

    monkeypatch.setattr(trainer_module, "build_run_data", no_data)
    cfg = load_config(TINY, [f"output_dir={tmp_path / 'run'}", "train.device=cpu", *FAST, "pose.target_length=512"])
    with pytest.raises(ConfigError, match=r"^pose.target_length \(512\) is past the position limit of the 'learned' "
                                          r"encoding \(256 positions\)"):
        trainer_module.Trainer(cfg).setup()


@pytest.mark.slow
def test_a_resumed_pose_run_has_the_uninterrupted_loss_curve(tmp_path):
    run = ["encoding.name=rope", "encoding.options={}", "train.max_steps=4", "pose.target_length=512",
           "train.gradient_accumulation_steps=2"]
    run_recipe(TINY, tmp_path / "full", *run)
    run_recipe(TINY, tmp_path / "split", *run, "train.stop_after=2")
    run_recipe(TINY, tmp_path / "split", *run, resume=True)
    full, split = losses(tmp_path / "full"), losses(tmp_path / "split")
    assert sorted(full) == sorted(split) == [1, 2, 3, 4]
    assert max(abs(full[k] - split[k]) for k in full) <= 1e-6


def test_a_remap_is_refused_with_the_way_to_combine_them():
    import transformers as T

    import hf_trajpe
    from hf_trajpe.training.pose import check_pose_model

    cfg = T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                        num_key_value_heads=1, vocab_size=64, max_position_embeddings=64)
    model = T.LlamaForCausalLM(cfg)
    handle = hf_trajpe.patch(model, "self_extend", group_size=2, window=16)
    with pytest.raises(ValueError, match="'self_extend' encoding \\(remap\\).*apply the remap to the tuned model"):
        check_pose_model(model, handle, 256)
