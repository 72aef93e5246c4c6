"""The released PLDR-LLM checkpoint format, both ways, and the reference outputs of the tiny_v51 fixture.

The fixture (`tests/fixtures/pldrllm_reference/tiny_v51`) holds a random-weight checkpoint in the released Hub
format with outputs computed by the author's remote code (transformers 4.56.1, float32, CPU, eager); see its README.
"""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

import plldr_hf
from tests.utils import REPO_ROOT, assert_close


@pytest.fixture(scope="module")
def fixture_dir(fixtures_dir):
    return fixtures_dir / "pldrllm_reference" / "tiny_v51"


@pytest.fixture(scope="module")
def expected(fixture_dir):
    return load_file(fixture_dir / "expected.safetensors")


@pytest.fixture(scope="module")
def reference_model(fixture_dir):
    return AutoModelForCausalLM.from_pretrained(fixture_dir, attn_implementation="eager").eval()


def test_released_folder_loads_without_remote_code(fixture_dir):
    # the folder's auto_map names remote-code files that are absent: only our registration can load it
    model, info = AutoModelForCausalLM.from_pretrained(fixture_dir, output_loading_info=True)
    assert isinstance(model, plldr_hf.PldrllmForCausalLM)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ref = load_file(fixture_dir / "model.safetensors")
    state = model.state_dict()
    assert set(state) == set(ref)
    for name, tensor in ref.items():
        assert torch.equal(state[name], tensor), f"{name} was re-initialised or changed on load"
    assert isinstance(AutoModel.from_pretrained(fixture_dir), plldr_hf.PldrllmModel)


def test_reference_logits_and_deductive_outputs(reference_model, expected):
    with torch.no_grad():
        out = reference_model(
            expected["input_ids"],
            use_cache=False,
            output_pldr_attentions=True,
            output_attentions=True,
            output_hidden_states=True,
        )
    assert_close("logits", expected["logits"], out.logits, atol=1e-4, rtol=1e-5)
    assert_close("logits (tight)", expected["logits"], out.logits, atol=1e-5, rtol=1e-5)
    for i, (a, a_lm, a_p, g_lm) in enumerate(out.pldr_attentions):
        assert_close(f"layer{i}.A", expected[f"layer{i}.A"], a, atol=1e-4)
        assert_close(f"layer{i}.A_LM", expected[f"layer{i}.A_LM"], a_lm)
        assert_close(f"layer{i}.G_LM", expected[f"layer{i}.G_LM"], g_lm)
        assert_close(f"layer{i}.E", expected[f"layer{i}.E"], out.attentions[i])
        plga = reference_model.decoder.dec_layers[i].mha1.plgatt_layer
        assert_close(f"layer{i}.A_P", a_lm**plga.pwlst, a_p)
    for i, hidden in enumerate(out.hidden_states):
        assert_close(f"hidden_states.{i}", expected[f"hidden_states.{i}"], hidden)


def test_reference_dag_values(reference_model, expected, fixture_dir):
    values = json.loads((fixture_dir / "expected.json").read_text())["dag_loss"]
    with torch.no_grad():
        out = reference_model(expected["input_ids"], use_cache=False, output_dag_losses=True)
    got = dict(zip(("A_LM", "A_P", "G_LM"), out.dag_losses.tolist()))
    for name, value in values.items():
        assert got[name] == pytest.approx(value, rel=1e-5), name


@pytest.mark.parametrize("use_cache", [True, False], ids=["kv_g_cache", "no_cache"])
def test_reference_greedy_generation(reference_model, expected, use_cache):
    # with the G-cache, G comes from the prompt only; without it G is recomputed each step: the two differ here
    key = "cached" if use_cache else "uncached"
    prompt = expected["gen.prompt_ids"]
    out = reference_model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=10,
        do_sample=False,
        use_cache=use_cache,
        return_dict_in_generate=True,
        output_logits=True,
    )
    assert out.sequences.tolist() == expected[f"gen.{key}.sequences"].tolist()
    assert_close(f"gen.{key}.logits", expected[f"gen.{key}.logits"], torch.stack(out.logits, dim=1))


@pytest.mark.parametrize("cache_first_G", [False, True], ids=["per_row_G", "cache_first_G"])
def test_reference_batched_g_cache(reference_model, expected, cache_first_G):
    key = f"gen_b2.cache_first_G_{str(cache_first_G).lower()}"
    prompt = expected["gen_b2.prompt_ids"]
    out = reference_model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        use_cache=True,
        cache_first_G=cache_first_G,
        return_dict_in_generate=True,
        output_logits=True,
    )
    assert out.sequences.tolist() == expected[f"{key}.sequences"].tolist()
    assert_close(f"{key}.logits", expected[f"{key}.logits"], torch.stack(out.logits, dim=1))


def test_reference_left_padded_batch_eager(fixture_dir, expected):
    # padded positions enter the Gram matrix in the reference; `reference_padding=True` reproduces that exactly
    reference_model = AutoModelForCausalLM.from_pretrained(
        fixture_dir, attn_implementation="eager", reference_padding=True
    ).eval()
    ids, mask = expected["padded.input_ids"], expected["padded.attention_mask"]
    with torch.no_grad():
        plain = reference_model(ids, attention_mask=mask, use_cache=False, output_pldr_attentions=True)
        with_pos = reference_model(
            ids, attention_mask=mask, position_ids=expected["padded.position_ids"], use_cache=False
        )
    assert_close("padded.logits", expected["padded.logits"], plain.logits)
    assert_close("padded.logits_with_position_ids", expected["padded.logits_with_position_ids"], with_pos.logits)
    for i in range(2):
        assert_close(f"padded.layer{i}.G_LM", expected[f"padded.layer{i}.G_LM"], plain.pldr_attentions[i][3])


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_default_padded_row_equals_the_reference_row_alone(fixture_dir, expected, attn_implementation):
    # by default pads stay out of the Gram matrix and positions follow the mask: the left-padded row reproduces the
    # reference model's own unpadded run of that row, with and without explicit position_ids, on both backends
    model = AutoModelForCausalLM.from_pretrained(fixture_dir, attn_implementation=attn_implementation).eval()
    ids, mask = expected["padded.input_ids"], expected["padded.attention_mask"]
    pads = int((mask[1] == 0).sum())
    with torch.no_grad():
        plain = model(ids, attention_mask=mask, use_cache=False).logits
        with_pos = model(ids, attention_mask=mask, position_ids=expected["padded.position_ids"], use_cache=False)
    reference_row = expected["padded.row1_unpadded_logits"].reshape(plain[1, pads:].shape)
    assert_close("padded row 1 vs reference alone", reference_row, plain[1, pads:])
    assert_close("padded row 1 (position_ids) vs reference alone", reference_row, with_pos.logits[1, pads:])


def test_save_writes_released_format(reference_model, fixture_dir, tmp_path):
    reference_model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    released = load_file(fixture_dir / "model.safetensors")
    assert {k: tuple(v.shape) for k, v in saved.items()} == {k: tuple(v.shape) for k, v in released.items()}
    saved_config = json.loads((tmp_path / "config.json").read_text())
    released_config = json.loads((fixture_dir / "config.json").read_text())
    for key, value in released_config.items():
        if key == "transformers_version":
            continue
        assert key in saved_config, f"released config field {key!r} not written"
        if key == "auto_map":  # the released entries, plus the base model and the other heads
            assert saved_config[key].items() >= value.items(), f"auto_map: saved {saved_config[key]!r}"
            continue
        assert saved_config[key] == value, f"{key}: saved {saved_config[key]!r} != released {value!r}"
    assert saved_config["architectures"] == ["PldrllmForCausalLM"]
    assert saved_config["auto_map"]["AutoModel"] == "modeling_pldrllm.PldrllmModel"
    assert (tmp_path / "modeling_pldrllm.py").is_file() and (tmp_path / "configuration_pldrllm.py").is_file()


def test_default_config_matches_released_110m():
    config = AutoConfig.for_model("pldrllm")
    assert isinstance(config, plldr_hf.PldrllmConfig)
    with torch.device("meta"):
        model = plldr_hf.PldrllmForCausalLM(config)
    state = model.state_dict()
    assert len(state) == 690
    assert sum(p.numel() for p in model.parameters()) == 109_689_362
    expected_shapes = {
        "decoder.embedding.weight": (32000, 896),
        "decoder.layernorm1.weight": (896,),
        "decoder.dec_layers.4.mha1.wq.weight": (896, 896),
        "decoder.dec_layers.4.mha1.dense.bias": (896,),
        "decoder.dec_layers.0.mha1.plgatt_layer.pwlst": (14, 64, 64),
        "decoder.dec_layers.0.mha1.layernorm1.weight": (64,),
        "decoder.dec_layers.3.mha1.reslayerAs.7.denseAs.1.gluw1.weight": (170, 64),
        "decoder.dec_layers.3.mha1.reslayerAs.7.denseAs.1.gluw3.weight": (64, 170),
        "decoder.dec_layers.3.mha1.reslayerAs.7.layernormA.bias": (64,),
        "decoder.dec_layers.2.ffn.gluw2.weight": (2389, 896),
        "decoder.dec_layers.2.layernorm2.bias": (896,),
        "final_layer.weight": (32000, 896),
        "final_layer.bias": (32000,),
    }
    for name, shape in expected_shapes.items():
        assert tuple(state[name].shape) == shape, name


def test_fixed_g_variant_has_released_buffers():
    # v51G: no metric learner or PLGA tensors, G in the persistent buffer [L, 3, 1, H, d, d]
    config = plldr_hf.PldrllmConfig(custom_G_type="identity")
    with torch.device("meta"):
        model = plldr_hf.PldrllmForCausalLM(config)
    state = model.state_dict()
    assert tuple(state["decoder.past_G_values"].shape) == (5, 3, 1, 14, 64, 64)
    assert tuple(state["decoder.past_G_values_status"].shape) == (5,)
    assert not any("reslayerAs" in k or "plgatt_layer" in k or "mha1.layernorm1" in k for k in state)
    assert sum(p.numel() for p in model.parameters()) == 105_606_482


def test_the_110m_training_preset_is_the_released_config_field_for_field():
    # what `plldr-hf train pldrllm --size 110m` builds (with the released 32,000-piece tokenizer): every field of the
    # released config.json is equal; only what save_pretrained stamps differs (its class list, dtype and version),
    # and auto_map holds the released entries plus the base model and the other heads
    from plldr_hf.training.recipes import pldrllm_config

    released = json.loads((REPO_ROOT / "tests" / "fixtures" / "pldrllm_released" / "config.json").read_text())
    ours = pldrllm_config("110m", 32000).to_dict()
    stamped = {"architectures", "dtype", "transformers_version", "auto_map"}
    assert {key: ours.get(key) for key in released if key not in stamped} == {
        key: value for key, value in released.items() if key not in stamped
    }
    assert ours["auto_map"].items() >= released["auto_map"].items()
