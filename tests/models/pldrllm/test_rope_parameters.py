"""`rope_parameters` (transformers 5's RoPE field) changes a PLDR-LLM as it changes Llama: each supported type gives
Llama's RoPE table for the same parameters, moves the logits away from plain RoPE, and an unsupported type is
refused."""

import re

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

import plldr_hf.models.pldrllm.modeling_pldrllm as mp
from tests.utils import tiny_config, tiny_model


TYPES = {
    "default": {"rope_type": "default", "rope_theta": 5e5},
    "linear": {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16},
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
}


@pytest.mark.parametrize("name", sorted(TYPES))
def test_each_type_gives_llamas_rope_table(name):
    params = TYPES[name]
    config = tiny_config(rope_parameters=dict(params))
    llama = LlamaConfig(
        vocab_size=99, hidden_size=32, num_attention_heads=2, head_dim=16, max_position_embeddings=64,
        rope_parameters=dict(params),
    )  # fmt: skip
    # positions past the original length, so the dynamic and scaled types differ from plain RoPE
    positions = torch.arange(40)[None]
    cos, sin = mp.rope_cos_sin(positions, config)
    llama_cos, llama_sin = LlamaRotaryEmbedding(llama)(torch.zeros(1, 40, 32), positions)
    # Llama repeats the d/2 angles in both halves (rotate_half); PLDR-LLM keeps them once for both conventions
    torch.testing.assert_close(cos[:, 0], llama_cos[..., :8], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(sin[:, 0], llama_sin[..., :8], atol=1e-6, rtol=1e-5)
    assert config.rope_theta == params["rope_theta"]


# dynamic NTK scaling starts past max_position_embeddings, which the reference RoPE table never reaches
CASES = [(name, ref) for name in sorted(TYPES) for ref in (False, True) if not (name == "dynamic" and ref)]


@pytest.mark.parametrize("name, reference_rope", CASES)
def test_each_type_changes_the_logits(name, reference_rope):
    # a 24-position table, 40 tokens (NeoX RoPE has no table to outgrow): past the original length of every type
    length = dict(max_position_embeddings=24 if name == "dynamic" else 64)
    plain = tiny_model(reference_rope=reference_rope, **length)
    scaled = tiny_model(reference_rope=reference_rope, rope_parameters=dict(TYPES[name]), **length)
    scaled.load_state_dict(plain.state_dict())
    ids = torch.randint(4, 99, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        delta = (plain(ids).logits - scaled(ids).logits).abs().max().item()
    assert delta > 1e-3, f"{name}: rope_parameters left the logits unchanged (max |Δ| {delta:.2e})"


def test_rope_parameters_round_trip_and_plain_rope_is_unchanged(tmp_path):
    model = tiny_model(rope_parameters=dict(TYPES["yarn"]))
    model.save_pretrained(tmp_path)
    again = type(model).from_pretrained(tmp_path, attn_implementation="eager")
    assert again.config.rope_parameters["rope_type"] == "yarn"
    ids = torch.randint(4, 99, (1, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, again(ids).logits)
    # no rope_parameters: the released behaviour, bit for bit
    base = tiny_model()
    same = tiny_model(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    same.load_state_dict(base.state_dict())
    with torch.no_grad():
        assert torch.equal(base(ids).logits, same(ids).logits)


@pytest.mark.parametrize("rope_type", ["longrope", "proportional", "nonsense"])
def test_unsupported_types_are_refused(rope_type):
    with pytest.raises(ValueError, match=f"rope_type={rope_type!r} is not supported"):
        tiny_config(rope_parameters={"rope_type": rope_type, "rope_theta": 1e4, "factor": 2.0})


BAD_ROPE_PARAMETERS = [
    ({"rope_type": "linear", "factor": float("nan")}, {}, "rope_parameters `factor` must be a finite number"),
    ({"rope_type": "linear", "factor": 0.0}, {}, "rope_parameters `factor` must be > 0.0"),
    ({"rope_type": "dynamic", "factor": "2"}, {}, "rope_parameters `factor` must be a number"),
    ({"rope_type": "yarn"}, {}, "rope_type='yarn' needs ['factor']"),
    ({"rope_type": "llama3", "factor": 8.0}, {}, "needs ['low_freq_factor', 'high_freq_factor'"),
    ({"rope_type": "linear", "factr": 2.0, "factor": 2.0}, {}, "unknown key(s) ['factr']"),
    ({"rope_type": "default", "rope_theta": 5e5}, {"rope_theta": 1e6}, "give the RoPE base once"),
]


@pytest.mark.parametrize("family", ["pldrllm", "agf"])
@pytest.mark.parametrize("params, extra, message", BAD_ROPE_PARAMETERS)
def test_rope_parameters_are_checked_when_the_config_is_built(family, params, extra, message):
    from tests.utils import tiny_agf_config

    build = tiny_config if family == "pldrllm" else lambda **kw: tiny_agf_config(position_encoding="rope", **kw)
    with pytest.raises(ValueError, match=re.escape(message)):
        build(rope_parameters=dict(params), **extra)
    # the base given once, in either field, is the config's one base
    assert build(rope_parameters={"rope_type": "default", "rope_theta": 5e5}).rope_theta == 5e5
    assert build(rope_theta=5e5, rope_parameters={"rope_type": "default", "rope_theta": 5e5}).rope_theta == 5e5
