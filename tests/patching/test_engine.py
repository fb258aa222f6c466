"""The engine's shape: schemes as plug-ins, one resolved plan, no hidden side channels."""

from __future__ import annotations

import contextlib

import pytest
import torch
from patch_models import build, output, random_ids

import hf_trajpe
from hf_trajpe.patching import SCHEMES, FamilyAdapter, PatchConfig, resolve_plan
from hf_trajpe.patching.schemes import Option, Scheme, register_scheme
from hf_trajpe.patching.schemes.sinusoidal import Sinusoidal

CODE = "def f(x):\n    if x > 0:\n        return [x, {'a': (1, 2)}]\n    return None\n"
RANDOM = "qz8#Lw!0xP@v^3m&Kd7*Rt%Y2nB(9fJ)cH~5gU=1sE+4aT<6yO>8iQ?7rW|0eZ"


@contextlib.contextmanager
def registered(cls):
    """Register a scheme for one test only (the registry is process-wide)."""
    register_scheme(cls)
    try:
        yield cls
    finally:
        SCHEMES.pop(cls.name, None)


class DoubleSinusoid(Sinusoidal):
    """A new scheme in a few lines: the sinusoid at twice the amplitude."""

    name = "double_sinusoid"

    def additive(self, positions, table):
        return 2.0 * super().additive(positions, table)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_registered_scheme_runs_as_an_encoding_and_as_a_trajectory_base(family):
    model = build(family)
    ids = random_ids(9, b=2)
    with hf_trajpe.patch(model, "sinusoidal", sinusoid_scale=2.0):
        want = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "trajectory", base="sinusoidal", strength=0.4, sinusoid_scale=2.0):
        want_traj = output(model, input_ids=ids)
    with registered(DoubleSinusoid):
        assert "double_sinusoid" in hf_trajpe.patching.adapter_for(model).encodings
        assert "double_sinusoid" in hf_trajpe.patching.adapter_for(model).trajectory_bases
        with hf_trajpe.patch(model, "double_sinusoid") as h:
            assert h.plan.scheme == "double_sinusoid"
            got = output(model, input_ids=ids)
        with hf_trajpe.patch(model, "trajectory", base="double_sinusoid", strength=0.4):
            got_traj = output(model, input_ids=ids)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got_traj, want_traj, rtol=0, atol=0)
    with pytest.raises(ValueError, match="supported encodings"):
        PatchConfig("double_sinusoid")  # gone with its registration


def test_a_causal_only_scheme_is_refused_on_a_bidirectional_model():
    class CausalOnly(Scheme):
        name = "causal_only"
        contributes = "nothing"
        bidirectional = False

    with registered(CausalOnly):
        with pytest.raises(ValueError, match="causal attention only"):
            hf_trajpe.patch(build("bert"), "causal_only")
        with hf_trajpe.patch(build("llama"), "causal_only") as h:
            assert h.plan.hook == "none"


def test_registering_a_bad_scheme_is_refused():
    class Odd(Scheme):
        name = "odd"
        contributes = "multiplicative"

    with pytest.raises(ValueError, match="contributes"):
        register_scheme(Odd)

    class Clash(Scheme):
        name = "alibi"
        contributes = "bias"

    with pytest.raises(ValueError, match="already registered"):
        register_scheme(Clash)


def test_what_a_family_supports_follows_what_it_offers():
    rotary_only = FamilyAdapter(name="R", model_types=("r",), native="rope", self_attention=(), rotary_path="rot")
    assert rotary_only.encodings == ("native", "sinusoidal", "rope", "none", "trajectory")
    assert rotary_only.trajectory_bases == ("sinusoidal", "rope")
    table_only = FamilyAdapter(name="T", model_types=("t",), native="learned", self_attention=(), table_path="wpe")
    assert table_only.encodings == ("native", "sinusoidal", "none", "trajectory")
    assert table_only.trajectory_bases == ("sinusoidal", "learned")
    full = hf_trajpe.patching.adapter_for(build("gpt2"))
    assert full.trajectory_bases == ("sinusoidal", "rope", "alibi", "learned")
    assert hf_trajpe.patching.adapter_for(build("llama")).trajectory_bases == ("sinusoidal", "rope", "alibi")


@pytest.mark.parametrize("family,encoding,options,hook,interpolation", [
    ("gpt2", "native", {}, "table", None),
    ("gpt2", "rope", {}, "attention", None),
    ("gpt2", "trajectory", {}, "table", "linear"),
    ("llama", "sinusoidal", {}, "embeddings", None),
    ("llama", "trajectory", {"base": "sinusoidal", "interpolation": "cubic"}, "embeddings", "cubic"),
    ("llama", "trajectory", {}, "rotary", "exact"),
    ("llama", "alibi", {}, "attention", None),
    ("bert", "none", {}, "none", None),
])
def test_the_plan_says_where_the_scheme_enters(family, encoding, options, hook, interpolation):
    model = build(family)
    plan = resolve_plan(PatchConfig(encoding, **options), model)
    assert (plan.hook, plan.interpolation) == (hook, interpolation)
    assert "hf_trajpe" not in model._modules  # resolving changes nothing


def test_plan_refuses_an_interpolation_its_base_cannot_take():
    with pytest.raises(ValueError, match="linear or cubic"):
        hf_trajpe.patch(build("gpt2"), "trajectory", interpolation="exact")  # base: the learned table


def test_texts_apply_within_the_block_only():
    model = build("gpt2")
    ids = random_ids(10, b=2)
    code, random_text = CODE, RANDOM
    with hf_trajpe.patch(model, "trajectory", strength="auto") as h:
        default = output(model, input_ids=ids)
        with h.texts([code, random_text]):
            inside = output(model, input_ids=ids)
            assert h.state.strength.last_types[1] == "random_content"
            assert h.state._auto_alpha.tolist()[1] == 0.0
        assert h.state.call_texts is None
        torch.testing.assert_close(output(model, input_ids=ids), default, rtol=0, atol=0)
        assert not torch.equal(inside, default)
        with pytest.raises(RuntimeError, match="boom"), h.texts([code, code]):
            raise RuntimeError("boom")
        assert h.state.call_texts is None
        with pytest.raises(TypeError, match="sequence of strings"), h.texts("one string"):
            pass


def test_set_texts_applies_to_the_next_forward_only():
    model = build("gpt2")
    ids = random_ids(10, b=2)
    with hf_trajpe.patch(model, "trajectory", strength="auto") as h:
        default = output(model, input_ids=ids)
        h.set_texts([CODE, RANDOM])
        once = output(model, input_ids=ids)
        assert h.state.strength.last_types[1] == "random_content"
        after = output(model, input_ids=ids)
    assert not torch.equal(once, default)
    torch.testing.assert_close(after, default, rtol=0, atol=0)


def test_the_global_monitor_records_only_when_enabled():
    from hf_trajpe.encodings import trajectory_positions
    from hf_trajpe.monitoring import enable_global_monitor, global_monitor

    emb = torch.randn(2, 5, 4)
    emb[0, 2] = float("nan")
    before = global_monitor.fallback_sequences
    with pytest.warns(RuntimeWarning, match="non-finite"):
        trajectory_positions(emb, strength=0.3)
    assert global_monitor.fallback_sequences == before  # off by default
    enable_global_monitor()
    try:
        with pytest.warns(RuntimeWarning, match="non-finite"):
            trajectory_positions(emb, strength=0.3)
        assert global_monitor.fallback_sequences == before + 1
    finally:
        enable_global_monitor(False)


def test_register_attention_is_idempotent_and_serves_models_loaded_with_our_names():
    from hf_trajpe.patching import register_attention

    register_attention()
    register_attention()
    stock = build("llama", "sdpa")
    ours = build("llama", "sdpa")
    ours.set_attn_implementation("hf_trajpe_sdpa")  # an unpatched model with our name runs the stock function
    ids = random_ids(7, b=1)
    torch.testing.assert_close(output(ours, input_ids=ids), output(stock, input_ids=ids), rtol=0, atol=0)


def test_the_embedding_weight_is_not_stored_on_the_state():
    model = build("gpt2")
    with hf_trajpe.patch(model, "trajectory", cache=True) as h:
        output(model, input_ids=random_ids(6))
        assert not any(torch.is_tensor(v) and v is model.get_input_embeddings().weight
                       for v in vars(h.state).values())


def _gain(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"gain (gained_sinusoid) must be a number > 0, got {value!r}")
    return float(value)


class GainedSinusoid(Sinusoidal):
    """A scheme with an option of its own, declared in its class and nowhere else."""

    name = "gained_sinusoid"
    options = (*Sinusoidal.options, Option("gain", 2.0, "number > 0", "factor on the sinusoid", _gain))

    def additive(self, positions, table):
        return self.plan.config.options["gain"] * super().additive(positions, table)


def test_a_scheme_declares_its_own_options_in_its_class(tmp_path):
    model = build("llama")
    ids = random_ids(9, b=2)
    with hf_trajpe.patch(model, "sinusoidal", sinusoid_scale=3.0):
        want = output(model, input_ids=ids)
    with registered(GainedSinusoid):
        config = PatchConfig("gained_sinusoid", gain=3)
        assert config.gain == 3.0 and config.scheme_options == {"gain": 3.0}  # checked, normalised, saved there
        assert PatchConfig("gained_sinusoid").options == {"sinusoid_scale": 1.0, "gain": 2.0}
        with pytest.raises(ValueError, match=r"gain \(gained_sinusoid\) must be a number > 0"):
            PatchConfig("gained_sinusoid", gain=0)
        with pytest.raises(ValueError, match="option\\(s\\) gain apply only to encoding='gained_sinusoid' or "
                                             "trajectory with base='gained_sinusoid', not 'rope'"):
            hf_trajpe.patch(model, "rope", gain=2.0)
        assert PatchConfig("trajectory", base="gained_sinusoid", gain=1.5).gain == 1.5  # the base's options apply
        with hf_trajpe.patch(model, "gained_sinusoid", gain=3.0):
            torch.testing.assert_close(output(model, input_ids=ids), want, rtol=0, atol=0)
            model.save_pretrained(tmp_path)
        back = hf_trajpe.patching.load_config(tmp_path)
        assert back == PatchConfig("gained_sinusoid", gain=3.0)
    with pytest.raises(TypeError, match=r"unknown patch option\(s\) \['gain'\]"):  # gone with its registration
        PatchConfig("sinusoidal", gain=2.0)


def test_the_options_table_of_the_docs_is_the_declarations():
    from pathlib import Path

    from hf_trajpe.patching.schemes.encodings import options_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "patching.md").read_text()
    start, end = doc.index("<!-- options-table:start -->\n"), doc.index("\n<!-- options-table:end -->")
    assert doc[start + len("<!-- options-table:start -->\n"):end] == options_table(), (
        "docs/patching.md's option table differs from the declarations: paste "
        "hf_trajpe.patching.schemes.encodings.options_table() between its markers")
