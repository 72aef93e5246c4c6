"""Shared assertion helpers and runner functions for the model tests."""

import torch

from plldr_hf import AgfConfig, AgfForConditionalGeneration, PldrllmConfig, PldrllmForCausalLM


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """`torch.testing.assert_close` with a message that reports the max and mean absolute difference."""
    ref, out = ref.detach(), out.detach()
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
    diff = (ref.double() - out.double()).abs()
    msg = (
        f"{name}: max |diff| {diff.max().item():.3e}, mean |diff| {diff.mean().item():.3e} (atol {atol}, rtol {rtol})"
    )
    torch.testing.assert_close(out.to(ref.dtype), ref, atol=atol, rtol=rtol, msg=msg)


def tiny_config(**overrides) -> PldrllmConfig:
    kwargs = dict(
        vocab_size=99,
        hidden_size=32,
        num_attention_heads=2,
        head_dim=16,
        intermediate_size=37,
        num_hidden_layers=2,
        A_dff=8,
        num_reslayerA=2,
        num_denseA=2,
        max_position_embeddings=64,
    )
    kwargs.update(overrides)
    return PldrllmConfig(**kwargs)


def tiny_model(attn_implementation="eager", **overrides) -> PldrllmForCausalLM:
    config = tiny_config(**overrides)
    config._attn_implementation = attn_implementation
    return PldrllmForCausalLM(config).eval()


def make_invariant(model: PldrllmForCausalLM) -> PldrllmForCausalLM:
    """Force the metric learner to an input-independent output: a zero-gain final LayerNorm returns its bias."""
    with torch.no_grad():
        for layer in model.decoder.dec_layers:
            norm = layer.mha1.reslayerAs[-1].layernormA
            norm.weight.zero_()
            norm.bias.normal_()
    return model


def tiny_agf(**overrides) -> AgfForConditionalGeneration:
    """A tiny AGF-family translation model (2+2 layers, 32 wide, 4 heads) in eval mode; `overrides` are AgfConfig
    fields."""
    kwargs = dict(
        vocab_size=99,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
    )
    kwargs.update(overrides)
    return AgfForConditionalGeneration(AgfConfig(**kwargs)).eval()
