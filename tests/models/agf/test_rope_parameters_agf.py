"""`rope_parameters` on the AGF translator's `rope` position encoding: Llama's RoPE table for each supported type,
different logits from plain RoPE, unsupported types and other position encodings refused."""

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from plldr_hf.models.agf import rotary as agf_rotary
from tests.utils import CONFIG_ERRORS, tiny_agf, tiny_agf_config


TYPES = {
    "linear": {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16},
    "llama3": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TYPES))
def test_rope_table_equals_llamas_and_the_logits_move(name):
    params = TYPES[name]
    # max_position_embeddings 24, 40 positions: past the original length of every type (dynamic NTK included)
    config = tiny_agf_config(position_encoding="rope", rope_parameters=dict(params), max_position_embeddings=24)
    llama = LlamaConfig(vocab_size=99, hidden_size=32, num_attention_heads=4, head_dim=8, max_position_embeddings=24,
                        rope_parameters=dict(params))  # fmt: skip
    positions = torch.arange(40)[None]
    cos, sin = agf_rotary.rotary_cos_sin(positions, 8, config)
    llama_cos, llama_sin = LlamaRotaryEmbedding(llama)(torch.zeros(1, 40, 32), positions)
    torch.testing.assert_close(cos[:, 0], llama_cos[..., :4], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(sin[:, 0], llama_sin[..., :4], atol=1e-6, rtol=1e-5)

    plain = tiny_agf(position_encoding="rope", max_position_embeddings=64)
    scaled = tiny_agf(position_encoding="rope", rope_parameters=dict(params), max_position_embeddings=24)
    scaled.load_state_dict(plain.state_dict())
    src = torch.randint(4, 99, (1, 40), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(4, 99, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        delta = (plain(src, decoder_input_ids=tgt).logits - scaled(src, decoder_input_ids=tgt).logits).abs().max()
    assert delta > 1e-4


def test_unsupported_types_and_other_encodings_are_refused():
    with pytest.raises(ValueError, match="rope_type='longrope' is not supported"):
        tiny_agf_config(position_encoding="rope", rope_parameters={"rope_type": "longrope", "rope_theta": 1e4})
    with pytest.raises(CONFIG_ERRORS, match="applies to position_encoding='rope'"):
        tiny_agf_config(position_encoding="agf", rope_parameters=dict(TYPES["linear"]))
