"""Probes of a hostile but fair user: each asserts the clear error or the correct result.

Every probe here once gave a silently wrong result or a misleading message.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
from patch_models import build, output, random_ids

import hf_trajpe
from hf_trajpe.patching import CONFIG_NAME, STATE_NAME, PatchConfig, get_handle, load_patch


# -- a trained strength is never lost silently ------------------------------------------------------
def test_a_folder_without_its_learned_state_refuses_to_load(tmp_path):
    model = build("gpt2")
    handle = hf_trajpe.patch(model, "trajectory", strength=0.3, learnable_strength=True)
    with torch.no_grad():
        handle.state.strength.raw.fill_(1.5)  # as if trained
    model.save_pretrained(tmp_path)
    os.remove(tmp_path / STATE_NAME)
    with pytest.raises(FileNotFoundError, match=f"{STATE_NAME} is missing.*learned state.*strength.raw"):
        hf_trajpe.from_pretrained(tmp_path)
    fresh = build("gpt2")
    stock = output(fresh, input_ids=random_ids(6))
    with pytest.raises(FileNotFoundError, match=STATE_NAME):
        load_patch(fresh, tmp_path)
    assert get_handle(fresh) is None and "hf_trajpe" not in fresh._modules
    torch.testing.assert_close(output(fresh, input_ids=random_ids(6)), stock, rtol=0, atol=0)


def test_a_fixed_strength_needs_no_state_file(tmp_path):
    model = build("gpt2")
    hf_trajpe.patch(model, "trajectory", strength=0.3)
    want = output(model, input_ids=random_ids(6))
    model.save_pretrained(tmp_path)
    if (tmp_path / STATE_NAME).exists():
        os.remove(tmp_path / STATE_NAME)  # only the fixed value, which the config holds
    torch.testing.assert_close(output(hf_trajpe.from_pretrained(tmp_path), input_ids=random_ids(6)), want,
                               rtol=0, atol=0)


# -- a failed load leaves the model as it was --------------------------------------------------------
@pytest.mark.parametrize("damage", ["wrong keys", "truncated"])
def test_a_failed_load_patch_leaves_the_model_as_it_was(tmp_path, damage):
    from safetensors.torch import save_file

    model = build("llama")
    hf_trajpe.patch(model, "trajectory", strength=0.3, learnable_strength=True)
    model.save_pretrained(tmp_path)
    path = tmp_path / STATE_NAME
    if damage == "wrong keys":
        save_file({"strength.other": torch.zeros(1)}, str(path))
    else:
        path.write_bytes(path.read_bytes()[:20])
    fresh = build("llama")
    ids = random_ids(7)
    stock = output(fresh, input_ids=ids)
    with pytest.raises(ValueError, match=STATE_NAME):
        load_patch(fresh, tmp_path)
    assert get_handle(fresh) is None and "hf_trajpe" not in fresh._modules
    assert fresh.config._attn_implementation == "sdpa"
    torch.testing.assert_close(output(fresh, input_ids=ids), stock, rtol=0, atol=0)


# -- positions: one meaning of max_positions, no silent clamp -----------------------------------------
def test_rotary_positions_run_past_max_position_embeddings_without_a_clamp():
    model = build("llama", max_position_embeddings=64)
    ids = random_ids(100, b=1)
    with hf_trajpe.patch(model, "trajectory", strength=0.5) as handle, warnings.catch_warnings():
        warnings.simplefilter("error")
        got = output(model, input_ids=ids)
        assert handle.clamped_tokens == 0
    with hf_trajpe.patch(model, "trajectory", strength=0.5, max_positions=10_000):
        torch.testing.assert_close(output(model, input_ids=ids), got, rtol=0, atol=0)
    with hf_trajpe.patch(model, "native"):
        assert torch.isfinite(output(model, input_ids=ids)).all()  # native runs to 99 as stock does


def test_a_clamp_at_a_table_end_is_said_once_and_counted():
    model = build("gpt2")  # 64 table rows
    ids = random_ids(60, b=1)
    with hf_trajpe.patch(model, "trajectory", strength=0.5) as handle:
        monitor = handle.attach_monitor()
        with pytest.warns(RuntimeWarning, match="clamped to 63.*learned table ends there"):
            output(model, input_ids=ids)
        first = handle.clamped_tokens
        assert first > 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once
            output(model, input_ids=ids)
        assert handle.clamped_tokens == 2 * first
        assert monitor.as_dict()["clamped_share"] == pytest.approx(first / 60)


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_max_positions_limits_every_family_alike(family):
    model = build(family)
    for enc in ("native", "rope", "sinusoidal"):
        with hf_trajpe.patch(model, enc, max_positions=8):
            output(model, input_ids=random_ids(8))
            with pytest.raises(ValueError, match="position limit is 8"):
                output(model, input_ids=random_ids(9))


# -- caller position_ids ----------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_position_ids_that_differ_from_the_ranks_are_refused(family):
    model = build(family)
    ids = random_ids(8, b=2)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ranks = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # what generate() passes
    with hf_trajpe.patch(model, "native"):
        want = output(model, input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(output(model, input_ids=ids, attention_mask=mask, position_ids=ranks), want,
                                   rtol=0, atol=0)
        with pytest.raises(ValueError, match="offset start, packed sequences"):
            output(model, input_ids=ids, attention_mask=mask, position_ids=ranks + 5)
        packed = torch.cat([torch.arange(4), torch.arange(4)])[None].expand(2, -1)
        with pytest.raises(ValueError, match="not supported"):
            output(model, input_ids=ids, position_ids=packed)


# -- static cache -------------------------------------------------------------------------------------
def test_a_static_cache_gets_a_message_that_says_so():
    model = build("llama")
    ids = random_ids(6, b=2)
    with hf_trajpe.patch(model, "trajectory", strength=0.3), pytest.raises(NotImplementedError, match="static KV"):
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                       cache_implementation="static")


# -- bad input ----------------------------------------------------------------------------------------
def test_a_saved_config_that_is_not_an_object_or_from_a_newer_version_names_the_file(tmp_path):
    (tmp_path / CONFIG_NAME).write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"{CONFIG_NAME} must hold a JSON object"):
        PatchConfig.load(tmp_path)
    (tmp_path / CONFIG_NAME).write_text("{not json")
    with pytest.raises(ValueError, match=f"cannot read .*{CONFIG_NAME}"):
        PatchConfig.load(tmp_path)
    (tmp_path / CONFIG_NAME).write_text(json.dumps({"encoding": "rope", "version": 7}))
    with pytest.raises(ValueError, match="format version 7.*upgrade hf_trajpe"):
        PatchConfig.load(tmp_path)
    (tmp_path / CONFIG_NAME).write_text(json.dumps({"encoding": "rope", "strength": 0.5}))
    with pytest.raises(ValueError, match=f"{CONFIG_NAME}: .*only to encoding='trajectory'"):
        PatchConfig.load(tmp_path)


@pytest.mark.parametrize("options,match", [
    ({"encoding": "rope", "max_positions": 10**9}, "max_positions must be an integer from 1 to 1,048,576"),
    ({"encoding": "rope", "max_positions": True}, "max_positions"),
    ({"encoding": "trajectory", "beta": True}, "beta"),
    ({"encoding": "trajectory", "strength": True}, "strength"),
    ({"encoding": "rope", "rope_theta": True}, "rope_theta"),
    ({"encoding": "rope", "rope_theta": float("inf")}, "rope_theta"),
    ({"encoding": "sinusoidal", "sinusoid_scale": True}, "sinusoid_scale"),
    ({"encoding": "trajectory", "cache": True, "cache_size": True}, "cache_size"),
])
def test_out_of_range_and_boolean_options_are_refused(options, match):
    with pytest.raises((ValueError, TypeError), match=match):
        PatchConfig(**options)


def test_finite_embeddings_that_overflow_the_norm_are_not_called_non_finite():
    from hf_trajpe.encodings import trajectory_positions

    emb = torch.randn(2, 5, 8) * 1e37  # every difference overflows float32's norm
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pos = trajectory_positions(emb, strength=0.5)
        _, past = trajectory_positions(emb[:, :4], strength=0.5, return_past=True)
        step = trajectory_positions(emb[:, 4:], strength=0.5, past=past)
    torch.testing.assert_close(pos, torch.arange(5.0).expand(2, 5) * 1.5)  # every step is a full alpha
    torch.testing.assert_close(step, pos[:, 4:])
    emb[0, 2, 0] = float("inf")
    with pytest.warns(RuntimeWarning, match="1 of 2 sequence"):
        trajectory_positions(emb, strength=0.5)


def test_an_empty_sequence_gets_a_clear_error():
    model = build("llama")
    with hf_trajpe.patch(model, "trajectory", strength=0.3), pytest.raises(ValueError, match="no tokens"):
        model(input_ids=torch.zeros(2, 0, dtype=torch.long))
