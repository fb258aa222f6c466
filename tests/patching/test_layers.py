"""Layer selections, layer maps and partial rotary (docs/patching.md, "Layer selections" and "Per head").

Exactness against real configurations: a SmolLM3 patched with ``none`` on layers 3 and 7 equals the SmolLM3
transformers builds with those layers' ``no_rope_layers`` entries 0; ``rotary_fraction`` equals GPT-NeoX's
``rotary_pct`` and Phi's ``partial_rotary_factor`` (same weights). Then cache, padding, save/reload, PEFT and
unpatch per layer, as for patches of every layer.
"""

from __future__ import annotations

import pytest
import torch
from patch_models import build, cached_logits, output, random_ids

import hf_trajpe
from hf_trajpe.patching import LayerMap, PatchConfig, get_handle, load_config, normalize_selection, resolve_selection
from hf_trajpe.patching.layers import describe_layers

LAYERS = 8
#: a map with every kind of per-layer patch: none, a bias, a score term, partial rotary, trajectory on rope
MAP = {"every:4:3": "none", "0-1": "alibi", "2": {"encoding": "rope", "rotary_fraction": 0.5},
       4: {"encoding": "cope", "npos_max": 8}, "5": {"encoding": "trajectory", "base": "rope", "strength": 0.4}}


def smollm3(no_rope_layers=None, attn="sdpa", seed=0):
    import transformers as T

    cfg = T.SmolLM3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                          no_rope_layers=no_rope_layers or [1] * LAYERS, pad_token_id=0, bos_token_id=1,
                          eos_token_id=2)
    torch.manual_seed(seed)
    return T.SmolLM3ForCausalLM._from_config(cfg, attn_implementation=attn, dtype=torch.float32).eval()


def cope_nonzero(handle) -> None:
    """CoPE starts at zero (= none); random vectors make its layers count in the checks."""
    for h in getattr(handle, "handles", (handle,)):
        if h.config.encoding == "cope":
            with torch.no_grad():
                for v in h.state.scheme.vectors:
                    v.normal_(0, 0.5)


# -- the selection grammar -----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,n,want", [
    ("every:4", 10, (0, 4, 8)), ("every:4:3", 8, (3, 7)), ("top:2", 8, (6, 7)), ("bottom:3", 8, (0, 1, 2)),
    ("0-3,7", 8, (0, 1, 2, 3, 7)), ("-1", 8, (7,)), ("::3", 8, (0, 3, 6)), ("2:6:2", 8, (2, 4)), ("-2:", 8, (6, 7)),
    ("all", 3, (0, 1, 2)), ("1, 1, 0-1", 4, (0, 1)), ([3, -1], 8, (3, 7)), (slice(1, None, 3), 8, (1, 4, 7)),
    (lambda i, n: i % 4 == 3, 8, (3, 7)),
])
def test_selections_resolve(spec, n, want):
    assert resolve_selection(spec, n) == want


@pytest.mark.parametrize("spec,match", [
    ("every:0", "N >= 1"), ("top:2:1", "only every:N takes an offset"), ("3-1", "ends before it starts"),
    ("1::0", "step 0"), ("first:2", "cannot read 'first:2'"), ("1,,2", "empty item"), ([], "non-empty"),
    ([1.5], "integers"),
    # a step written with more digits is still 0: refused here, naming the option and the grammar (not Python's
    # "slice step cannot be zero" when the model is patched)
    ("::00", r"layers '::00': the slice '::00' has step 0; .*'::2'.* A layer selection is '7'"),
    ("::-0", "has step 0"), ("1:-:2", "cannot read '1:-:2'"),
])
def test_bad_selections_are_refused_without_a_model(spec, match):
    with pytest.raises(ValueError, match=match):
        normalize_selection(spec)


@pytest.mark.parametrize("spec,match", [
    ("9", "layer 9 does not exist; this model has 8 layers"), ("top:9", "more layers than the model has"),
    ("every:4:8", "starts past the last layer"), ("8:", "selects no layer"), ([0, 8], "layer 8 does not exist"),
])
def test_selections_out_of_range_are_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        resolve_selection(spec, 8)


def test_selections_keep_their_form_in_the_config_and_its_file(tmp_path):
    assert PatchConfig("none", layers=slice(None, None, 4)).layers == "::4"
    assert PatchConfig("none", layers=[3, 7]).layers == (3, 7) and PatchConfig("none", layers=-1).layers == (-1,)
    assert describe_layers((0, 1, 2, 3, 7, 9, 10)) == "0-3, 7, 9, 10"
    cfg = PatchConfig("rope", layers="every:4:3", rotary_fraction=0.5)
    cfg.save(tmp_path)
    assert load_config(tmp_path) == cfg and '"version": 2' in (tmp_path / "hf_trajpe_config.json").read_text()
    with pytest.raises(ValueError, match="rotary_fraction applies only where a rotation is applied"):
        PatchConfig("alibi", rotary_fraction=0.5)
    with pytest.raises(ValueError, match=r"rotary_fraction must be a number in \(0, 1\]"):
        PatchConfig("rope", rotary_fraction=0.0)
    with pytest.raises(ValueError, match="layer map entry 'top:2': .*leave 'layers' out"):
        LayerMap.from_spec({"top:2": {"encoding": "none", "layers": "0"}})


# -- exactness against real configurations ------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_none_on_layers_3_and_7_is_smollm3_with_those_layers_nope(attn):
    model = smollm3(attn=attn)
    nope = [1] * LAYERS
    nope[3] = nope[7] = 0
    reference = smollm3(nope, attn=attn)
    reference.load_state_dict(model.state_dict())
    ids = random_ids(12, b=2)
    stock = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "none", layers=[3, 7]) as handle:
        assert handle.layers == (3, 7)
        torch.testing.assert_close(output(model, input_ids=ids), output(reference, input_ids=ids))
    assert torch.equal(output(model, input_ids=ids), stock)
    with hf_trajpe.patch(model, "none", layers="every:4:3"):  # SmolLM3-3B's own NoPE layers, by the grammar
        torch.testing.assert_close(output(model, input_ids=ids), output(reference, input_ids=ids))


def test_layers_not_selected_are_the_stock_model_bit_for_bit():
    model = smollm3()
    ids = random_ids(10, b=2)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        stock, logits = out.hidden_states, out.logits
        with hf_trajpe.patch(model, "alibi", layers=[5]):
            patched = model(input_ids=ids, output_hidden_states=True).hidden_states
        with hf_trajpe.patch(model, "native", layers="all"):  # the layer machinery with the model's own rotation
            assert torch.equal(model(input_ids=ids).logits, logits)
    assert all(torch.equal(a, b) for a, b in zip(stock[:6], patched[:6], strict=True))  # up to layer 5's input
    assert not torch.equal(stock[6], patched[6])


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family,key,full,part", [("gpt_neox", "rotary_pct", 1.0, 0.25),
                                                  ("phi", "partial_rotary_factor", 1.0, 0.5)])
def test_rotary_fraction_is_gpt_neox_rotary_pct_and_phi_partial_rotary_factor(family, key, full, part, attn):
    import transformers as T

    def built(value):
        common = dict(vocab_size=128, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                      intermediate_size=128, max_position_embeddings=128, pad_token_id=0, **{key: value})
        if family == "gpt_neox":
            cfg, cls = T.GPTNeoXConfig(hidden_dropout=0.0, attention_dropout=0.0, **common), T.GPTNeoXForCausalLM
        else:
            cfg, cls = T.PhiConfig(resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, **common), T.PhiForCausalLM
        torch.manual_seed(0)
        return cls._from_config(cfg, attn_implementation=attn, dtype=torch.float32).eval()

    model, reference = built(full), built(part)
    reference.load_state_dict(model.state_dict())
    ids = random_ids(12, b=2)
    stock = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "rope", rotary_fraction=part):
        torch.testing.assert_close(output(model, input_ids=ids), output(reference, input_ids=ids))
    assert torch.equal(output(model, input_ids=ids), stock)


def test_rotary_fraction_on_a_model_without_rotary_rotates_the_first_dimensions():
    """GPT-2 has no rotary module: ``rope`` runs inside its attention; with a fraction only the first dimensions of
    each head turn, so queries and keys that differ only in the rest give position-free scores there."""
    model = build("gpt2")
    ids = random_ids(10, b=2)
    with hf_trajpe.patch(model, "rope", rotary_fraction=1.0):
        whole = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "rope"):
        torch.testing.assert_close(output(model, input_ids=ids), whole, rtol=0, atol=0)
    with hf_trajpe.patch(model, "rope", rotary_fraction=0.5):
        half = output(model, input_ids=ids)
    with hf_trajpe.patch(model, "none"):
        nope = output(model, input_ids=ids)
    assert not torch.allclose(half, whole) and not torch.allclose(half, nope)


# -- per layer as for whole-model patches: cache, padding, reload, PEFT, unpatch ----------------------------------
def test_a_layer_map_decodes_with_the_cache_and_pads_like_the_rows_alone():
    model = smollm3()
    handle = hf_trajpe.patch(model, MAP)
    cope_nonzero(handle)
    ids = random_ids(14, b=2)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    whole = output(model, input_ids=ids, attention_mask=mask)
    stepwise = cached_logits(model, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(stepwise[real], whole[real], rtol=1e-4, atol=1e-5)
    alone = output(model, input_ids=ids[:1, 4:])
    torch.testing.assert_close(whole[0, 4:], alone[0], rtol=1e-4, atol=1e-5)
    gen = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(model.generate(ids, attention_mask=mask, use_cache=True, **gen),
                           model.generate(ids, attention_mask=mask, use_cache=False, **gen))
    handle.unpatch()


def test_composed_patches_unpatch_in_any_order_to_the_stock_model():
    model = smollm3()
    ids = random_ids(9, b=2)
    stock = output(model, input_ids=ids)
    keys, attn = list(model.state_dict()), model.config._attn_implementation
    h_none = hf_trajpe.patch(model, "none", layers="every:4:3")
    h_alibi = hf_trajpe.patch(model, "alibi", layers="0-1")
    h_cope = hf_trajpe.patch(model, "cope", layers=[4], npos_max=8)
    cope_nonzero(h_cope)
    together = output(model, input_ids=ids)
    with pytest.raises(ValueError, match=r"layers 6, 7 are selected twice: by rope on layers 5-7 and by none on "
                                         r"layers 3, 7|layer 7 is selected twice"):
        hf_trajpe.patch(model, "rope", layers="top:3")
    with pytest.raises(RuntimeError, match="a patch of every layer does not compose"):
        hf_trajpe.patch(model, "alibi")
    assert torch.equal(output(model, input_ids=ids), together)  # refusals leave the patches in force
    handle = get_handle(model)
    assert [h.config.encoding for h in handle.handles] == ["none", "alibi", "cope"]
    same = hf_trajpe.patch(smollm3(), {"every:4:3": "none", "0-1": "alibi", 4: {"encoding": "cope", "npos_max": 8}})
    same.handles[2].state.load_state_dict(h_cope.state.state_dict())
    assert torch.equal(output(same.model, input_ids=ids), together)  # a map is the same as composed calls
    h_alibi.unpatch()
    assert not h_alibi.active and h_none.active and h_cope.active
    h_cope.unpatch()
    with hf_trajpe.patch(model, "alibi", layers="0-1"):  # what was taken off can be put back
        pass
    h_none.unpatch()
    assert get_handle(model) is None and "hf_trajpe" not in model._modules
    assert list(model.state_dict()) == keys and model.config._attn_implementation == attn
    assert torch.equal(output(model, input_ids=ids), stock)


def test_layer_maps_save_and_reload_with_their_learned_state(tmp_path):
    from transformers import AutoModelForCausalLM

    model = smollm3()
    hf_trajpe.patch(model, "trajectory", base="rope", strength=0.3, learnable_strength=True, layers="top:2")
    cope = hf_trajpe.patch(model, "cope", layers="0-2", npos_max=8)
    cope_nonzero(cope)
    ids = random_ids(10, b=2)
    before = output(model, input_ids=ids)
    model.save_pretrained(tmp_path)
    assert isinstance(load_config(tmp_path), LayerMap)
    back = hf_trajpe.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert torch.equal(output(back, input_ids=ids), before)
    assert [h.layers for h in get_handle(back).handles] == [(6, 7), (0, 1, 2)]
    auto = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    hf_trajpe.load_patch(auto, tmp_path)
    assert torch.equal(output(auto, input_ids=ids), before)
    single = smollm3()
    hf_trajpe.patch(single, "none", layers=lambda i, n: i % 4 == 3)  # a callable is saved as its indices
    single.save_pretrained(tmp_path / "one")
    assert load_config(tmp_path / "one").layers == (3, 7)
    assert torch.equal(output(hf_trajpe.from_pretrained(tmp_path / "one").eval(), input_ids=ids),
                       output(single, input_ids=ids))


def test_lora_trains_and_saves_on_a_layer_mapped_model(tmp_path):
    peft = pytest.importorskip("peft")
    model = smollm3()
    hf_trajpe.patch(model, {"every:4:3": "none", "0-1": "alibi"})
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      lora_dropout=0.0))
    lora.train()
    params = [p for p in lora.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    ids = random_ids(16, b=4)
    losses = []
    for _ in range(4):
        loss = lora(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    lora.eval()
    want = output(lora, input_ids=ids)
    lora.save_pretrained(tmp_path / "adapter")
    hf_trajpe.save_patch(lora, tmp_path / "adapter")
    fresh = smollm3()
    hf_trajpe.load_patch(fresh, tmp_path / "adapter")
    back = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    torch.testing.assert_close(output(back, input_ids=ids), want)


def test_a_deep_copy_of_a_layer_mapped_model_is_independent():
    import copy

    model = smollm3()
    handle = hf_trajpe.patch(model, {"every:4:3": "none", "0": "alibi"})
    ids = random_ids(8)
    want = output(model, input_ids=ids)
    clone = copy.deepcopy(model)
    assert torch.equal(output(clone, input_ids=ids), want)
    handle.unpatch()
    assert torch.equal(output(clone, input_ids=ids), want) and get_handle(clone) is not None


# -- what is refused, and why ---------------------------------------------------------------------------------------
def test_layer_selections_that_cannot_apply_are_refused_with_the_reason():
    with pytest.raises(NotImplementedError, match="learned position table added once to the input embeddings"):
        hf_trajpe.patch(build("gpt2"), "alibi", layers=[0])
    model = smollm3()
    with pytest.raises(ValueError, match="sinusoidal is added once to the input embeddings"):
        hf_trajpe.patch(model, "sinusoidal", layers=[0])
    with pytest.raises(ValueError, match="rope_parameters extends the whole model's context"):
        hf_trajpe.patch(model, "rope", layers=[0], rope_parameters={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="layer 8 does not exist; this model has 8 layers"):
        hf_trajpe.patch(model, "none", layers=[8])
    with pytest.raises(ValueError, match="layers 0, 1 are selected twice"):
        hf_trajpe.patch(model, {"0-1": "none", "bottom:2": "alibi"})
    with pytest.raises(ValueError, match="rotates 5; the rotated width must be even"):
        hf_trajpe.patch(model, "rope", rotary_fraction=0.33)
    assert get_handle(model) is None
    with hf_trajpe.patch(model, "alibi"):  # a patch of every layer is alone
        with pytest.raises(RuntimeError, match=r"already patched \(alibi\); a patch of every layer does not compose"):
            hf_trajpe.patch(model, "none", layers=lambda i, n: i == 0)
    nope = smollm3([1, 1, 1, 0, 1, 1, 1, 0])
    with pytest.raises(ValueError, match="layers 3, 7 of this SmolLM3 apply no rotation of their own.*"
                                         "rotary_fraction=1.0"):
        hf_trajpe.patch(nope, "trajectory", base="rope", layers="every:4:3")
    with hf_trajpe.patch(nope, "rope", rotary_fraction=1.0, layers="every:4:3"):  # the advice works
        assert not torch.equal(output(nope, input_ids=random_ids(6)), output(smollm3([1, 1, 1, 0, 1, 1, 1, 0]),
                                                                              input_ids=random_ids(6)))
