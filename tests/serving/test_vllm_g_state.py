"""The learned-G state layer of the vLLM plugin (`plldr_hf/serving/vllm_g_state.py`) against the transformers model's
maths, layer by layer: the metric learner on vLLM's CPU GEMM at prefill, and q·G_LM read in place from the state at
decode, for every layout the state can have.

Opt-in (marker `vllm`), in the environment `tools/make_vllm_env.sh` makes:

    .venv-vllm/bin/python -m pytest -m vllm tests/serving/test_vllm_g_state.py
"""

import types

import pytest
import torch

from tests.utils import tiny_config


pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def _needs_vllm():
    pytest.importorskip("vllm", reason="vLLM is not installed here: run `bash tools/make_vllm_env.sh`, use .venv-vllm")


def _state_layer(config, heads=slice(None)):
    from vllm.config import VllmConfig, set_current_vllm_config

    from plldr_hf.serving.vllm_g_state import PldrllmGState

    heads = slice(0, config.num_attention_heads) if heads == slice(None) else heads
    with set_current_vllm_config(VllmConfig()):
        return PldrllmGState(config, heads, prefix="decoder.dec_layers.0.mha1.g_state")


def _layer_of_a_model(config, heads=slice(None)):
    """(layer 0's attention of a transformers model off its init, as a trained model is; a state layer with its
    metric learner, on vLLM's GEMM)."""
    from plldr_hf import PldrllmForCausalLM

    reference = PldrllmForCausalLM(config).eval().decoder.dec_layers[0].mha1
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    layer = _state_layer(config, heads)
    learner = ("layernorm1", "reslayerAs", "plgatt_layer")
    layer.load_state_dict({k: v for k, v in reference.state_dict().items() if k.split(".")[0] in learner})
    layer.pack_weights()
    return reference, layer


@pytest.mark.parametrize("heads", [slice(None), slice(1, 2)], ids=["all-heads", "one-rank-of-two"])
def test_prefill_g_on_vllm_gemm_equals_the_transformers_model(heads):
    """G_LM of prompts of 1 to 70 tokens, computed together over all their Gram matrices' rows on vLLM's CPU GEMM
    (more rows than one block, so the blocks are exercised), equals the transformers model's module path on each
    prompt alone; a tensor-parallel rank's layer computes its own heads' G."""
    from plldr_hf.models.pldrllm.fused_units import FUSED_BLOCK_ROWS
    from plldr_hf.models.pldrllm.modeling_pldrllm import metric_learner
    from plldr_hf.models.pldrllm.plga import gram_matrix

    torch.manual_seed(0)
    config = tiny_config(num_attention_heads=2, head_dim=32, hidden_size=64, A_dff=24, num_reslayerA=3)
    reference, layer = _layer_of_a_model(config, heads)
    assert layer.run_units is not None, "on a CPU the metric learner runs on vLLM's GEMM"
    h = layer.num_heads
    lengths = [1, 70, *torch.randint(1, 71, (38,)).tolist()]
    prompts = [torch.randn(n, h, config.head_dim) for n in lengths]
    assert len(lengths) * h * config.head_dim > FUSED_BLOCK_ROWS
    with torch.no_grad():
        got = layer.g_of(prompts)
        for prompt, g in zip(prompts, got):
            a0 = gram_matrix(prompt.transpose(0, 1)[None])
            a = metric_learner(a0, reference.layernorm1, reference.reslayerAs, fused=False)
            want = reference.plgatt_layer(a, layer.heads).g_lm[0]
            torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-5)


def _paged_state(slots, heads, d, slot_stride):
    """A state (slots, H, d, d) lying in a larger buffer, each slot `slot_stride` floats apart (vLLM pages a hybrid
    model's states like its KV blocks, so a slot's stride exceeds H·d·d)."""
    buffer = torch.randn(slots * slot_stride + 7)
    return torch.as_strided(buffer, (slots, heads, d, d), (slot_stride, d * d, d, 1), storage_offset=7)


@pytest.mark.parametrize("slot_stride", [3 * 16 * 16, 5 * 16 * 16 + 16], ids=["contiguous", "paged"])
def test_decode_reads_g_in_place_as_a_gather_would(slot_stride):
    """q'_i = q_i·G_LM[slot_i] for decode tokens whose requests sit in any slots, in any order, read in place."""
    from plldr_hf.serving.vllm_g_state import PldrllmGState, in_place_rows

    heads, d = 3, 16
    states = _paged_state(40, heads, d, slot_stride)
    slots = torch.tensor([17, 3, 39, 0, 22, 5])
    q = torch.randn(len(slots), heads, d)
    offsets = torch.arange(heads * d)
    assert in_place_rows(states, slots, offsets) is not None
    layer = types.SimpleNamespace(kv_cache=(states,), num_heads=heads, head_dim=d, row_offsets=offsets)
    got = PldrllmGState.project_decodes(layer, q, slots)
    want = torch.matmul(q[:, :, None, :], states[slots])[:, :, 0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_decode_gathers_when_the_state_has_no_row_view():
    """A layout whose rows are not d-contiguous (here each G stored transposed) has no in-place view: the layer gathers
    and still gives q·G."""
    from plldr_hf.serving.vllm_g_state import PldrllmGState, in_place_rows

    heads, d = 2, 8
    states = torch.randn(10, heads, d, d).transpose(-1, -2)
    slots = torch.tensor([4, 1])
    q = torch.randn(2, heads, d)
    offsets = torch.arange(heads * d)
    assert in_place_rows(states, slots, offsets) is None
    layer = types.SimpleNamespace(kv_cache=(states,), num_heads=heads, head_dim=d, row_offsets=offsets)
    torch.testing.assert_close(
        PldrllmGState.project_decodes(layer, q, slots), torch.matmul(q[:, :, None, :], states[slots])[:, :, 0]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_step_of_decodes_and_prefills_writes_each_tokens_q_g(monkeypatch, dtype):
    """One vLLM step with decodes first, then two prompts: each decode token gets q·G_LM of its request's slot, each
    prompt's G_LM is written to its slot and its tokens get q·G_LM with it, in the model's dtype; the step's padding
    rows are left alone."""
    from plldr_hf.serving import vllm_g_state

    torch.manual_seed(0)
    config = tiny_config(num_attention_heads=2, head_dim=16, hidden_size=32, A_dff=24, num_reslayerA=2)
    _, layer = _layer_of_a_model(config)
    heads, d = layer.num_heads, layer.head_dim
    states = _paged_state(8, heads, d, 3 * heads * d * d)
    before = states.clone()
    layer.kv_cache = (states,)
    decode_slots, prompt_slots, lengths = torch.tensor([5, 1]), torch.tensor([2, 7]), [3, 4]
    step = len(decode_slots) + sum(lengths)
    metadata = types.SimpleNamespace(
        num_decode_tokens=len(decode_slots),
        num_prefill_tokens=sum(lengths),
        state_indices_tensor_d=decode_slots,
        state_indices_tensor_p=prompt_slots,
        query_start_loc_p=torch.tensor([0, 3, 7]),
        has_initial_states_p=None,
    )
    monkeypatch.setattr(
        vllm_g_state, "get_forward_context", lambda: types.SimpleNamespace(attn_metadata={layer.prefix: metadata})
    )
    q = torch.randn(step + 1, heads * d).to(dtype)  # the last row: padding of the step
    out = torch.full_like(q, 7.0)
    with torch.no_grad():
        layer.forward_native(q, out)
        q32 = q.float().view(-1, heads, d)
        want_decodes = torch.matmul(q32[:2, :, None, :], before[decode_slots])[:, :, 0]
        prompts = [q32[2:5], q32[5:9]]
        want_g = layer.g_of(prompts)
    assert not want_g.isnan().any()
    out = out.view(-1, heads, d)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out[:2], want_decodes.to(dtype), **tolerance)
    torch.testing.assert_close(states[prompt_slots], want_g)
    for (start, end), prompt, g in zip([(2, 5), (5, 9)], prompts, want_g):
        want = torch.matmul(prompt.transpose(0, 1), g).transpose(0, 1)
        torch.testing.assert_close(out[start:end], want.to(dtype), **tolerance)
    assert bool((out[step:] == 7.0).all()), "the padding rows are not the layer's to write"
    untouched = [s for s in range(8) if s not in prompt_slots.tolist()]
    torch.testing.assert_close(states[untouched], before[untouched])
