"""Probes of a hostile but fair user: each asserts the clear error or the correct result.

Every probe here once gave a silently wrong result or a misleading message.
"""

from __future__ import annotations

import copy
import io
import json
import os
import threading
import warnings

import pytest
import torch
from patch_models import build, output, random_ids

import hf_trajpe
from hf_trajpe.compat import cache_kwarg, output_cache
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


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_decoding_steps_position_ids_are_checked_against_the_cached_ranks(family):
    """A decoding step's ``position_ids`` pass by one comparison when they are the ranks (a padded row's too) and
    are refused as before when they are not."""
    model = build(family)
    ids = random_ids(6, b=2)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0
    with hf_trajpe.patch(model, "trajectory", strength=0.3), torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask[:, :6], use_cache=True)
        cache = output_cache(out)
        new = out.logits[:, -1:].argmax(-1)
        ranks = torch.tensor([[6], [4]])  # real tokens before the new one: 6 and 4

        def step(**kw):
            return model(input_ids=new, attention_mask=mask, use_cache=True,
                         **{cache_kwarg(): copy.deepcopy(cache)}, **kw)

        with pytest.raises(ValueError, match="offset start, packed sequences"):
            step(position_ids=ranks + 1)
        given, derived = step(position_ids=ranks), step()
    torch.testing.assert_close(given.logits, derived.logits, rtol=0, atol=0)


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


# -- copies, threads, pickles, attention switches -------------------------------------------------------
COPY_CASES = [("gpt2", "trajectory", {"strength": 0.3}), ("llama", "alibi", {}),
              ("llama", "trajectory", {"strength": 0.3, "learnable_strength": True})]


@pytest.mark.parametrize("family,encoding,opts", COPY_CASES)
def test_deepcopy_gives_an_independent_patched_copy(family, encoding, opts):
    """Copied before the original ran any forward: its own state and handle, the same outputs; unpatching
    the copy leaves the original patched, and changing its strength leaves the original's alone."""
    model = build(family)
    ids = random_ids(9, b=2)
    handle = hf_trajpe.patch(model, encoding, **opts)
    clone = copy.deepcopy(model)
    clone_handle = get_handle(clone)
    assert clone_handle is not None and clone_handle is not handle and clone_handle.model is clone
    assert clone_handle.state is not handle.state and clone.hf_trajpe is clone_handle.state
    want = output(model, input_ids=ids)
    assert torch.equal(output(clone, input_ids=ids), want)
    if opts.get("learnable_strength"):
        with torch.no_grad():
            clone_handle.state.strength.raw.fill_(0.9)
        assert not torch.equal(output(clone, input_ids=ids), want)
    clone_handle.unpatch()
    assert get_handle(model) is handle and handle.active
    assert torch.equal(output(model, input_ids=ids), want)
    handle.unpatch()
    assert torch.equal(output(model, input_ids=ids), output(clone, input_ids=ids))  # both stock now


def _while_a_forward_waits_in(model, layer: int, first, second) -> None:
    """Run ``first`` (a forward) in a thread that waits inside Llama layer ``layer`` while ``second`` runs here, then
    let it finish; ``second``'s exception propagates once ``first`` is done."""
    inside, release = threading.Event(), threading.Event()

    def wait_in_layer(module, args):
        if threading.current_thread().name == "first":
            inside.set()
            release.wait(30)

    hook = model.model.layers[layer].register_forward_pre_hook(wait_in_layer)
    thread = threading.Thread(target=first, name="first")
    thread.start()
    try:
        assert inside.wait(30)
        second()
    finally:
        release.set()
        thread.join(30)
        hook.remove()


def test_one_patched_model_runs_one_forward_at_a_time_and_a_second_thread_is_refused():
    """A documented limit: the positions of a forward live on the patched model, so a forward started in
    another thread while one runs raises (instead of reading the other's positions); after it, and after a
    forward that raised, any thread may run the model again."""
    model = build("llama")
    ids = random_ids(9, b=2)
    hf_trajpe.patch(model, "trajectory", strength=0.3)
    want = output(model, input_ids=ids)
    got = {}
    with pytest.raises(RuntimeError, match="running a forward in another thread.*copy.deepcopy"):
        _while_a_forward_waits_in(model, 0, lambda: got.setdefault("first", output(model, input_ids=ids)),
                                  lambda: output(model, input_ids=random_ids(5, b=2, seed=3)))
    assert torch.equal(got["first"], want)
    with pytest.raises(ValueError, match="no tokens"):  # a forward that raises still ends
        model(input_ids=torch.zeros(2, 0, dtype=torch.long))
    other = {}
    t = threading.Thread(target=lambda: other.setdefault("x", output(model, input_ids=ids)))
    t.start()
    t.join(30)
    assert torch.equal(other["x"], want)


@pytest.mark.parametrize("encoding", ["trajectory", "self_extend"])
def test_a_refused_thread_leaves_the_running_forward_and_its_cache_alone(encoding):
    """The refused thread's forward still calls the post-hook (torch calls it when a pre-hook raises); it must not
    end the running forward: that forward keeps its positions, stores its decoding memory on its cache and (a
    remap) its rotated keys, so decoding after it equals one forward over the whole sequence."""
    from transformers import DynamicCache

    model = build("llama")
    ids = random_ids(12, b=2, seed=5)
    opts = {"strength": 0.3} if encoding == "trajectory" else {"group_size": 2, "window": 4}
    hf_trajpe.patch(model, encoding, **opts)
    want = output(model, input_ids=ids)
    cache = DynamicCache(config=model.config)
    got = {}

    def prompt():
        with torch.no_grad():
            got["prompt"] = model(input_ids=ids[:, :11], use_cache=True, **{cache_kwarg(): cache}).logits

    with pytest.raises(RuntimeError, match="running a forward in another thread"):
        _while_a_forward_waits_in(model, 1, prompt, lambda: output(model, input_ids=random_ids(5, b=2, seed=3)))
    with torch.no_grad():
        step = model(input_ids=ids[:, 11:], use_cache=True, **{cache_kwarg(): cache}).logits
    torch.testing.assert_close(torch.cat((got["prompt"], step), dim=1), want, rtol=1e-4, atol=1e-5)


def test_torch_save_of_a_patched_model_names_the_supported_way():
    model = build("gpt2")
    handle = hf_trajpe.patch(model, "trajectory", strength=0.3)
    with pytest.raises(TypeError, match=r"cannot be pickled.*save_pretrained.*hf_trajpe\.save_patch"):
        torch.save(model, io.BytesIO())
    torch.save(model.state_dict(), io.BytesIO())  # the weights alone save as usual
    handle.unpatch()
    torch.save(model, io.BytesIO())


def test_set_attn_implementation_keeps_an_attention_encoding_or_raises():
    model = build("llama")  # sdpa
    ids = random_ids(9, b=2)
    handle = hf_trajpe.patch(model, "alibi")
    want = output(model, input_ids=ids)
    with pytest.raises(ValueError, match="would drop the encoding.*hf_trajpe.unpatch"):
        model.set_attn_implementation("eager")
    model.set_attn_implementation("sdpa")  # the implementation ours wraps: nothing changes
    assert model.config._attn_implementation == "hf_trajpe_sdpa"
    assert torch.equal(output(model, input_ids=ids), want) and handle.active
    handle.unpatch()
    assert model.config._attn_implementation == "sdpa"
    gpt2 = build("gpt2")  # trajectory on the learned table runs outside attention: a switch keeps it
    with hf_trajpe.patch(gpt2, "trajectory", strength=0.3):
        before = output(gpt2, input_ids=ids)
        gpt2.set_attn_implementation("eager")
        torch.testing.assert_close(output(gpt2, input_ids=ids), before)


# -- saved files ----------------------------------------------------------------------------------------
def test_a_stale_patch_beside_a_later_unpatched_save_does_not_come_back(tmp_path):
    model = build("gpt2")
    handle = hf_trajpe.patch(model, "trajectory", strength=0.3)
    model.save_pretrained(tmp_path)
    assert get_handle(hf_trajpe.from_pretrained(tmp_path)) is not None
    handle.unpatch()
    model.save_pretrained(tmp_path)  # the stock model, into the same folder
    with pytest.raises(ValueError, match=f"{CONFIG_NAME} .*left by an earlier save.*not patched"):
        hf_trajpe.from_pretrained(tmp_path)
    hf_trajpe.patch(model, "trajectory", strength=0.3)
    model.save_pretrained(tmp_path)  # saved patched again: loads patched
    assert get_handle(hf_trajpe.from_pretrained(tmp_path)) is not None


def test_the_resolved_base_is_saved_and_a_reload_into_another_family_is_refused(tmp_path):
    model = build("gpt2")
    hf_trajpe.patch(model, "trajectory", strength=0.3)  # on the model's own scheme: the learned table
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / CONFIG_NAME).read_text())["base"] == "learned"
    llama = build("llama")
    with pytest.raises(ValueError, match="does not fit this LlamaForCausalLM.*trajectory on 'learned'"):
        load_patch(llama, tmp_path)
    assert get_handle(llama) is None


@pytest.mark.parametrize("family,encoding,opts", [
    ("gpt2", "native", {}), ("gpt2", "trajectory", {}), ("llama", "alibi", {}), ("llama", "sinusoidal", {}),
    ("llama", "none", {}), ("llama", "trajectory", {"base": "alibi"}), ("gpt2", "trajectory", {"base": "learned"}),
])
def test_rope_theta_where_no_rotation_runs_is_refused(family, encoding, opts):
    model = build(family)
    with pytest.raises(ValueError, match="rope_theta applies only where a rotation is applied.*leave rope_theta out"):
        hf_trajpe.patch(model, encoding, rope_theta=500.0, **opts)
    assert get_handle(model) is None
    with hf_trajpe.patch(model, "rope", rope_theta=500.0):  # where it is used, it is taken
        pass


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_meta_device_model_gets_a_clear_error(family):
    stock = build(family)
    with torch.device("meta"):
        model = type(stock)(stock.config)
    with pytest.raises(ValueError, match="weights on the meta device.*Load the weights first"):
        hf_trajpe.patch(model, "trajectory", strength=0.3)
    assert get_handle(model) is None


def test_a_state_file_holding_nan_is_refused_at_load_naming_the_file(tmp_path):
    from safetensors.torch import load_file, save_file

    model = build("gpt2")
    hf_trajpe.patch(model, "trajectory", strength=0.3, learnable_strength=True)
    model.save_pretrained(tmp_path)
    state = load_file(tmp_path / STATE_NAME)
    save_file({k: torch.full_like(v, float("nan")) for k, v in state.items()}, tmp_path / STATE_NAME)
    fresh = build("gpt2")
    with pytest.raises(ValueError, match=f"{STATE_NAME} holds NaN or infinite values"):
        load_patch(fresh, tmp_path)
    assert get_handle(fresh) is None


@pytest.mark.parametrize("version", [0, None, "1", -3, 1.0])
def test_a_damaged_format_version_is_called_invalid_not_newer(tmp_path, version):
    (tmp_path / CONFIG_NAME).write_text(json.dumps({"encoding": "rope", "version": version}))
    with pytest.raises(ValueError, match="invalid format version.*damaged") as err:
        PatchConfig.load(tmp_path)
    assert "newer" not in str(err.value) and "upgrade" not in str(err.value)
