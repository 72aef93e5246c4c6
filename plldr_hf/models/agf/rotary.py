"""RoPE for the AGF family's `rope` position encoding (arXiv 2104.09864): the angles of `config.rope_parameters`'s
type (transformers' RoPE initialisation functions, as Llama computes them) and the rotation of feature pairs."""

from __future__ import annotations

import copy

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .configuration_agf import AgfConfig


# Copied from plldr_hf.models.pldrllm.modeling_pldrllm.rope_frequencies
def rope_frequencies(config, head_dim: int, positions: torch.Tensor) -> tuple[torch.Tensor, float]:
    """RoPE inverse frequencies θ_i (d/2,) and the attention factor of `config.rope_parameters`'s type for one call's
    `positions`: plain RoPE θ_i = base^(−2i/d) (no `rope_parameters`, or type "default"), else transformers'
    initialisation function of the type (linear, dynamic NTK, YaRN, Llama 3), as Llama computes them. Dynamic NTK
    scaling reads the longest position of the call (outside torch.compile; compiled, the table length)."""
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        base = params.get("rope_theta", config.rope_theta)
        return 1.0 / (base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)), 1.0
    seq_len = None
    if rope_type == "dynamic" and not torch.compiler.is_compiling():
        seq_len = int(positions.max()) + 1
    if getattr(config, "head_dim", None) != head_dim:
        config = copy.copy(config)
        config.head_dim = head_dim
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, positions.device, seq_len)
    return inv_freq.float(), float(attention_factor)


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, config: AgfConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the RoPE angles position·θ_i (arXiv 2104.09864; `rope_frequencies`) times the type's attention
    factor, float32 (B, 1, L, d/2)."""
    inv_freq, factor = rope_frequencies(config, head_dim, positions)
    angles = positions.float()[:, None, :, None] * inv_freq
    return angles.cos() * factor, angles.sin() * factor


def apply_rotary(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE: rotate feature pair (2i, 2i+1) of each head by the angles of `rotary_cos_sin`; states (B, H, L, d)."""
    even, odd = states[..., 0::2].float(), states[..., 1::2].float()
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return rotated.to(states.dtype)
