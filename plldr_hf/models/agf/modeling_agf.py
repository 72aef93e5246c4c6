r"""AGF / PCM-V translation Transformer: an encoder–decoder whose attention takes position from one config switch.

Self-contained for `trust_remote_code`: imports only torch, transformers (public names), the standard library and
`.configuration_agf`. AGF and PCM-V: arXiv 2603.04805 (only its abstract is public; LC1–LC3 as described there);
baselines: each function names its paper.

Notable features (what differs from Marian/BART):

- `position_encoding="agf"` (default): no absolute position vectors; a strictly positive coefficient c_h(m, n) of
  the relative distance multiplies the scaled logit, a = softmax((q·k/√d)·c + mask), mask added after the
  multiplication (adding the mask first would scale −∞ by c). c = exp(log c) is built in float32 from three switchable parts:
  LC1 per-head directional power law, LC2 per-distance amplitude, LC3 per-feature weights (separable form, below).
- `pcmv=True`: the values are weighted by the coefficient once more after the softmax, o_m = Σ_n a_mn·c_mn·v_n,
  without renormalising. Returned attention weights are the effective weights a·c.
- Baselines behind the same switch: sinusoidal (vanilla), RoPE, ALiBi, KERPLE power / log, T5 buckets, none.
- Two attention paths with one result: the eager reference (materialised scores; default, trains everywhere) and a
  FlexAttention path (`attn_implementation="flex_attention"`): AGF as a `score_mod`, PCM-V by the exact two-pass
  log-sum-exp identity o = exp(lse' − lse)·softmax(s + log c)·V. Fully masked query rows give 0.
- Relative distances always come from real token positions (cumulative sum of the 2D attention mask), so left
  padding and cached decoding see the same δ as an unpadded, uncached run.
- The LM loss is cross-entropy on the given (unshifted) labels, divided by `num_items_in_batch` when the Trainer
  passes it; `self.loss_function` is not used because for `ForConditionalGeneration` it shifts the labels again.

Symbols (paper → code):

| symbol | meaning | code |
|---|---|---|
| δ = m − n | signed distance, query minus key position (δ > 0: key in the past) | `delta` |
| σ | side of δ: 0 past/self (δ ≥ 0), 1 future (δ < 0) | `side` |
| r_{h,σ} | LC1 radius, softplus(ρ) + ε_r | `AgfPositionCoefficient.radius_raw` (ρ), `agf_min_radius` (ε_r) |
| k_{h,σ} | LC1 exponent, unconstrained (c > 0 for any k; k = 0 gives c ≡ 1) | `AgfPositionCoefficient.exponent` |
| Base_{h,σ} | LC1 scale, softplus(β) or fixed 1 | `AgfPositionCoefficient.base_raw` (β) |
| A_h(δ) | LC2 amplitude, exp(α), δ clipped to ±D_max | `AgfPositionCoefficient.amplitude_raw` (α = log A) |
| w_{h,j} | LC3 per-feature weight, exp(ω) | `AgfPositionCoefficient.feature_weight_raw` (ω = log w) |
| c_h(δ) | Base·(1 + |δ|/r)^(−k)·A(δ) | `agf_log_coefficient()` (log c), `AgfPositionCoefficient.log_coefficient_term()` |
| c_v | PCM-V coefficient: c itself or a separate LC1·LC2 | `value_coefficient` (when `pcmv_coefficient="separate"`) |
| μ_h | ALiBi slope | `alibi_slopes()` |
| a_h, p_h | KERPLE parameters | `KerpleBias.bias_a`, `KerpleBias.bias_p` (official names) |
| E[bucket, h] | T5 bias table | `T5RelativeBias.relative_attention_bias` |

LC3 enters separably: Σ_j q_j·k_j·c·w_j = c·((q ⊙ w)·k), so it scales the query before the logit and,
with PCM-V, the head output; it never needs a per-feature score matrix.
"""

import functools
import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from transformers import AttentionInterface, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)

from .configuration_agf import AgfConfig


try:
    # torch >= 2.9 requests the log-sum-exp through AuxRequest; `return_lse=True` is deprecated there
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:
    AuxRequest = None


# version shim: transformers 5.24 renamed the cache keyword and output field `past_key_values` -> `cache` (5.23 knows
# only `past_key_values`; the old name is deprecated until 5.40). Forward signatures accept both spellings; the mask
# helpers and the output dataclasses get the installed one. The remote code of each family carries this shim and the
# input checks below as marked copies (tests/test_copies.py keeps them equal).
CACHE_NAME = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def merge_cache_kwargs(cache: Cache | None, past_key_values: Cache | None, owner: str) -> Cache | None:
    """One cache from either spelling; the old one warns where transformers deprecates it, as in-tree models do."""
    if past_key_values is not None:
        if cache is not None and cache is not past_key_values:
            raise ValueError(f"{owner}: pass the cache as `cache` or `past_key_values`, not both")
        if CACHE_NAME == "cache":
            warnings.warn(
                f"`past_key_values` is deprecated and will be removed in version 5.40.0 for `{owner}`. "
                "Use `cache` instead.",
                FutureWarning,
                stacklevel=3,
            )
    return cache if cache is not None else past_key_values


def check_inputs(owner: str, input_ids, inputs_embeds, attention_mask, vocab_size: int, past_length: int = 0) -> None:
    """Clear errors for inputs that would fail deep inside or silently: empty inputs, token ids outside
    the vocabulary, an attention mask of the wrong shape. Ids are checked only when no cache is filled yet (the
    decode steps feed back the model's own predictions; a check there would cost a device sync per token)."""
    if torch.compiler.is_compiling():
        return
    shape = tuple((input_ids if input_ids is not None else inputs_embeds).shape)
    if len(shape) < 2 or 0 in shape[:2]:
        raise ValueError(f"{owner}: empty input of shape {shape}; pass at least one token per row, as (batch, length)")
    if input_ids is not None and past_length == 0:
        low, high = (int(v) for v in torch.aminmax(input_ids))  # one pass, one device sync
        if low < 0 or high >= vocab_size:
            bad = high if high >= vocab_size else low
            raise ValueError(
                f"{owner}: token id {bad} is outside the vocabulary [0, {vocab_size}); was the input made by another "
                "model's tokenizer?"
            )
    if attention_mask is not None and attention_mask.dim() == 2:
        expected = (shape[0], past_length + shape[1])
        if tuple(attention_mask.shape) != expected:
            raise ValueError(
                f"{owner}: `attention_mask` of shape {tuple(attention_mask.shape)}, expected {expected} "
                f"(batch, cached {past_length} + new {shape[1]} tokens)"
            )


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Labels → decoder inputs: prepend the start token, drop the last label, and turn -100 into padding."""
    if pad_token_id is None or decoder_start_token_id is None:
        raise ValueError(
            "`pad_token_id` and `decoder_start_token_id` must be set to derive decoder inputs from labels"
        )
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def positions_from_mask(attention_mask: torch.Tensor | None, batch_size: int, length: int, device) -> torch.Tensor:
    """Real token positions (B, length): index among the non-padding tokens, so left padding does not shift them."""
    if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.shape[-1] == length:
        return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    return torch.arange(length, device=device).expand(batch_size, length)


def sinusoidal_position_embedding(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/dim)), PE(pos, 2i+1) = cos(·) (arXiv 1706.03762 §3.5), float32 (B, L, dim)."""
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim)
    angles = positions.float()[..., None] * inv_freq  # (B, L, ceil(dim/2))
    embedding = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    return embedding[..., :dim]


def apply_rotary(states: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE (arXiv 2104.09864): rotate feature pair (2i, 2i+1) of each head by position·θ^(−2i/d). states (B, H, L, d)."""
    head_dim = states.shape[-1]
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=states.device, dtype=torch.float32) / head_dim)
    angles = positions.float()[:, None, :, None] * inv_freq  # (B, 1, L, d/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = states[..., 0::2].float(), states[..., 1::2].float()
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return rotated.to(states.dtype)


def alibi_slopes(num_heads: int) -> list[float]:
    """ALiBi slopes μ_h = 2^(−8h/H); for H not a power of two, append every other slope of the 2P list (arXiv 2108.12409, as in its code)."""

    def power_of_two_slopes(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two_slopes(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two_slopes(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


def t5_relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """T5 bucket of ρ = key − query (arXiv 1910.10683, as in transformers' T5); element-wise, so it also runs inside a flex `score_mod`."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        relative_position = relative_position.abs()
    else:
        relative_position = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    # clamp(min=1) only keeps log() finite for the entries that take the exact branch anyway
    scaled = torch.log(relative_position.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, relative_position, large)


def agf_log_coefficient(
    head: torch.Tensor,
    delta: torch.Tensor,
    radius: torch.Tensor | None,
    exponent: torch.Tensor | None,
    log_base: torch.Tensor | None,
    log_amplitude: torch.Tensor | None,
    directional: bool,
    max_distance: int,
) -> torch.Tensor:
    """log c_h(δ) = log Base_{h,σ} − k_{h,σ}·log1p(|δ|/r_{h,σ}) + log A_h(clip δ), float32.

    Parameter tables are (H, sides) for LC1 and (H, table) for LC2; a None table is a disabled component.
    """
    side = (delta < 0).long() if directional else torch.zeros_like(delta)
    out = None
    if radius is not None:
        out = -exponent[head, side] * torch.log1p(delta.abs().float() / radius[head, side])
        if log_base is not None:
            out = out + log_base[head, side]
    if log_amplitude is not None:
        index = delta.clamp(-max_distance, max_distance) + max_distance if directional else delta.abs()
        term = log_amplitude[head, index.clamp(max=log_amplitude.shape[1] - 1)]
        out = term if out is None else out + term
    return out


def alibi_bias(head: torch.Tensor, delta: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    """ALiBi −μ_h·|δ| (arXiv 2108.12409)."""
    return -slopes[head] * delta.abs().float()


def kerple_power_bias(head: torch.Tensor, delta: torch.Tensor, a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """KERPLE power −a_h·|δ|^(p_h) (KERPLE, arXiv 2205.09921)."""
    return -a[head] * delta.abs().float().pow(p[head])


def kerple_log_bias(head: torch.Tensor, delta: torch.Tensor, a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """KERPLE log −p_h·log(1 + a_h·|δ|) (KERPLE, arXiv 2205.09921)."""
    return -p[head] * torch.log1p(a[head] * delta.abs().float())


def t5_bias(
    head: torch.Tensor,
    delta: torch.Tensor,
    table: torch.Tensor,
    bidirectional: bool,
    num_buckets: int,
    max_distance: int,
) -> torch.Tensor:
    """T5 E[bucket(n − m), h] (arXiv 1910.10683); `table` is (num_buckets, H)."""
    return table[t5_relative_position_bucket(-delta, bidirectional, num_buckets, max_distance), head]


@dataclass
class PositionTerm:
    """A positional formula `fn(head, delta, *args)` with its parameter tensors passed explicitly.

    `fn` is a module-level function and the tensors travel as arguments, not as closure cells: FlexAttention traces
    the `score_mod` with Dynamo, which in torch 2.13 reused stale tensors for nested closures that shared code (a
    shared then a separate PCM-V coefficient in one process); explicit arguments are guarded correctly.
    """

    fn: Callable
    args: tuple

    def __call__(self, head: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return self.fn(head, delta, *self.args)


@dataclass
class AttentionPositionTerms:
    """What an attention function needs to apply a relative position encoding.

    The terms take `(head, delta)` index tensors (broadcastable, or scalars inside a flex `score_mod`) and return
    float32 values of the same broadcast shape, so the eager and the flex paths evaluate one formula.

    Attributes:
        query_positions: (B, Lq) real positions of the queries.
        key_positions: (B, Lk) real positions of the keys.
        log_coefficient: log c; the scaled logit is multiplied by c = exp(log c) before the mask (AGF).
        bias: added to the scaled logit (ALiBi, KERPLE, T5).
        value_log_coefficient: log c_v; the probabilities are multiplied by c_v after the softmax (PCM-V). The same
            object as `log_coefficient` when PCM-V shares the AGF coefficient.
    """

    query_positions: torch.Tensor
    key_positions: torch.Tensor
    log_coefficient: PositionTerm | None = None
    bias: PositionTerm | None = None
    value_log_coefficient: PositionTerm | None = None

    def grid(self, num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Index tensors over every score: head (1, H, 1, 1) and delta = m − n (B, 1, Lq, Lk)."""
        delta = self.query_positions[:, None, :, None] - self.key_positions[:, None, None, :]
        head = torch.arange(num_heads, device=delta.device).view(1, -1, 1, 1)
        return head, delta

    def distance_table(self, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the eager path evaluates the terms on: every distance once, then one gather per score.

        Returns head (H, 1), the distinct distances δ_min … δ_max as (1, N), and each score's index into them,
        (B, 1, Lq, Lk). A term evaluated on (head, distances) gives an (H, N) table; `gather_distance_table` spreads
        it over the scores. The formulas then run on H·N values instead of B·H·Lq·Lk, and their gradient is one
        index_add into the table instead of an accumulating scatter over every score.
        """
        delta = self.query_positions[:, None, :, None] - self.key_positions[:, None, None, :]
        low, high = (int(value) for value in delta.aminmax()) if delta.numel() else (0, 0)
        distances = torch.arange(low, high + 1, device=delta.device)[None, :]
        head = torch.arange(num_heads, device=delta.device)[:, None]
        return head, distances, delta - low


def gather_distance_table(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(H, N) values per head and distance → (B, H, Lq, Lk) values per score, for `index` (B, 1, Lq, Lk)."""
    batch, _, q_len, k_len = index.shape
    heads = table.shape[0]
    return table.index_select(1, index.reshape(-1)).view(heads, batch, q_len, k_len).transpose(0, 1)


class AgfPositionCoefficient(nn.Module):
    """AGF coefficient c_h(δ) = Base_{h,σ}·(1 + |δ|/r_{h,σ})^(−k_{h,σ})·A_h(clip δ) and LC3 weights w_h.

    Evaluated in log space, log c = log Base − k·log1p(|δ|/r) + log A, so c = exp(log c) > 0 for every parameter
    value and PCM-V's two-pass path can use log c directly. With `causal=True` (decoder self-attention) only the
    past/self side is ever used.
    """

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        *,
        power_law: bool = True,
        directional: bool = True,
        learn_base: bool = False,
        min_radius: float = 0.05,
        init_mode: str = "spread",
        amplitude_max_distance: int = 0,
        feature_weights: bool = False,
        causal: bool = False,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.power_law = power_law
        self.directional = directional
        self.learn_base = learn_base
        self.min_radius = min_radius
        self.init_mode = init_mode
        self.amplitude_max_distance = amplitude_max_distance
        self.causal = causal
        sides = 2 if directional else 1
        if power_law:
            self.radius_raw = nn.Parameter(torch.empty(num_heads, sides))
            self.exponent = nn.Parameter(torch.empty(num_heads, sides))
            if learn_base:
                self.base_raw = nn.Parameter(torch.empty(num_heads, sides))
        if amplitude_max_distance > 0:
            table = 2 * amplitude_max_distance + 1 if directional else amplitude_max_distance + 1
            self.amplitude_raw = nn.Parameter(torch.empty(num_heads, table))
        if feature_weights:
            self.feature_weight_raw = nn.Parameter(torch.empty(num_heads, head_dim))

    @property
    def has_position_terms(self) -> bool:
        return self.power_law or self.amplitude_max_distance > 0

    def initial_values(self) -> dict[str, torch.Tensor]:
        """Init (the paper's values are not public): heads spread from local (r = 1, k = 2) to global (r = 64, k = 0.25); A = w = Base = 1.

        `init_mode="flat"` sets k = 0, so c ≡ 1 exactly at init.
        """
        values = {}
        if self.power_law:
            sides = self.radius_raw.shape[1]
            radius = torch.logspace(0.0, math.log10(64.0), self.num_heads, dtype=torch.float64)
            exponent = torch.logspace(math.log10(2.0), math.log10(0.25), self.num_heads, dtype=torch.float64)
            if self.init_mode == "flat":
                exponent = torch.zeros_like(exponent)
            # inverse of r = softplus(ρ) + ε_r
            shifted = radius - self.min_radius
            values["radius_raw"] = (shifted + torch.log(-torch.expm1(-shifted)))[:, None].expand(-1, sides)
            values["exponent"] = exponent[:, None].expand(-1, sides)
            if self.learn_base:
                values["base_raw"] = torch.full((self.num_heads, sides), math.log(math.e - 1.0), dtype=torch.float64)
        if self.amplitude_max_distance > 0:
            values["amplitude_raw"] = torch.zeros_like(self.amplitude_raw, dtype=torch.float64)
        if hasattr(self, "feature_weight_raw"):
            values["feature_weight_raw"] = torch.zeros_like(self.feature_weight_raw, dtype=torch.float64)
        return values

    def feature_weight(self) -> torch.Tensor | None:
        """LC3 weights w = exp(ω), (H, d_head) float32, or None when LC3 is off."""
        raw = getattr(self, "feature_weight_raw", None)
        return None if raw is None else torch.exp(raw.float())

    def log_coefficient_term(self) -> PositionTerm | None:
        """log c as a `PositionTerm` over the constrained parameters (float32), or None when c ≡ 1."""
        if not self.has_position_terms:
            return None
        radius = exponent = log_base = log_amplitude = None
        if self.power_law:
            radius = F.softplus(self.radius_raw.float()) + self.min_radius  # (H, sides)
            exponent = self.exponent.float()
            if self.learn_base:
                log_base = torch.log(F.softplus(self.base_raw.float()))
        if self.amplitude_max_distance > 0:
            log_amplitude = self.amplitude_raw.float()  # (H, table)
        return PositionTerm(
            agf_log_coefficient,
            (radius, exponent, log_base, log_amplitude, self.directional, self.amplitude_max_distance),
        )

    def logit_terms(self, device=None) -> tuple[PositionTerm | None, PositionTerm | None]:
        """(log-coefficient, bias) terms on the scaled logits: AGF multiplies them by c and adds no bias."""
        return self.log_coefficient_term(), None

    def query_weight(self) -> torch.Tensor | None:
        """LC3 (H, d_head): scales the query (and, with PCM-V, the head output); None when off."""
        return self.feature_weight()

    def coefficient(self, distances: torch.Tensor, initial: bool = False) -> torch.Tensor:
        """c_h(δ) for a 1-D tensor of signed distances: (H, N) float32 (LC1·LC2; LC3 is position-free).

        `initial=True` evaluates the curves at `initial_values()` (what training started from) instead of the
        current parameters.
        """
        if initial:
            device = distances.device
            values = {name: value.to(device) for name, value in self.initial_values().items()}
            return torch.func.functional_call(self, values, (distances,))
        term = self.log_coefficient_term()
        if term is None:
            return torch.ones(self.num_heads, distances.numel())
        head = torch.arange(self.num_heads, device=distances.device)[:, None]
        return torch.exp(term(head, distances[None, :]))

    def forward(self, distances: torch.Tensor) -> torch.Tensor:
        # only for `coefficient(initial=True)`, which evaluates through `torch.func.functional_call`
        return self.coefficient(distances)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, power_law={self.power_law}, directional={self.directional}, "
            f"amplitude_max_distance={self.amplitude_max_distance}, causal={self.causal}"
        )


class _PositionBias(nn.Module):
    """Base of the additive relative encodings (ALiBi, KERPLE, T5): a bias on the scaled logits, no coefficient."""

    def bias_term(self, device=None) -> PositionTerm:
        raise NotImplementedError

    def logit_terms(self, device=None) -> tuple[PositionTerm | None, PositionTerm | None]:
        return None, self.bias_term(device)

    def query_weight(self) -> torch.Tensor | None:
        return None


class AlibiBias(_PositionBias):
    """ALiBi (arXiv 2108.12409): bias −μ_h·|δ|, fixed slopes; the symmetric form covers the bidirectional encoder."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.slope_values = alibi_slopes(num_heads)

    def bias_term(self, device) -> PositionTerm:
        return PositionTerm(alibi_bias, (torch.tensor(self.slope_values, dtype=torch.float32, device=device),))


class KerpleBias(_PositionBias):
    """KERPLE (arXiv 2205.09921, official code github.com/chijames/KERPLE): power −a·|δ|^p or log −p·log(1 + a·|δ|).

    Init a ~ U(0, 1), p ~ U(0, 2); clamped in forward to a ≥ 0.01, p ∈ [0.01, 2] (power) or both ≥ 0.01 (log). The
    official code clamps `.data` in place, so a clamped parameter still receives gradient; the straight-through
    clamp here has the same forward value and the same gradient without mutating parameters in forward.
    """

    def __init__(self, num_heads: int, kind: str):
        super().__init__()
        if kind not in ("power", "log"):
            raise ValueError(f"KERPLE kind must be 'power' or 'log', got {kind!r}")
        self.kind = kind
        self.bias_p = nn.Parameter(torch.empty(num_heads))
        self.bias_a = nn.Parameter(torch.empty(num_heads))

    @staticmethod
    def _straight_through_clamp(value: torch.Tensor, min_value: float, max_value: float | None = None):
        return value + (value.clamp(min=min_value, max=max_value) - value).detach()

    def bias_term(self, device=None) -> PositionTerm:
        a = self._straight_through_clamp(self.bias_a.float(), 0.01)
        p = self._straight_through_clamp(self.bias_p.float(), 0.01, 2.0 if self.kind == "power" else None)
        return PositionTerm(kerple_power_bias if self.kind == "power" else kerple_log_bias, (a, p))


class T5RelativeBias(_PositionBias):
    """T5 relative bias (arXiv 1910.10683): E[bucket(n − m), h], one table per stack, bidirectional in the encoder."""

    def __init__(self, num_heads: int, num_buckets: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def bias_term(self, device=None) -> PositionTerm:
        table = self.relative_attention_bias.weight.float()  # (num_buckets, H)
        return PositionTerm(t5_bias, (table, self.bidirectional, self.num_buckets, self.max_distance))


def _agf_coefficient(config: AgfConfig, num_heads: int, head_dim: int, causal: bool, feature_weights=None):
    return AgfPositionCoefficient(
        num_heads,
        head_dim,
        power_law=config.agf_power_law,
        directional=config.agf_directional,
        learn_base=config.agf_learn_base,
        min_radius=config.agf_min_radius,
        init_mode=config.agf_init,
        amplitude_max_distance=config.agf_amplitude_max_distance,
        feature_weights=config.agf_feature_weights if feature_weights is None else feature_weights,
        causal=causal,
    )


def _t5_bias(config: AgfConfig, num_heads: int, head_dim: int, causal: bool) -> T5RelativeBias:
    return T5RelativeBias(
        num_heads,
        config.relative_attention_num_buckets,
        config.relative_attention_max_distance,
        bidirectional=not causal,
    )


def _never(config: AgfConfig) -> bool:
    return False


@dataclass(frozen=True)
class PositionEncoding:
    """How one `position_encoding` enters the model: an entry of `POSITION_ENCODING_REGISTRY`, the only place that
    tells the encodings apart.

    Attributes:
        build: `(config, heads, head_dim, causal) → module` evaluated inside attention, or None. The module's
            `logit_terms()` gives its `PositionTerm`s (a log-coefficient multiplying the scaled logits, a bias added
            to them), which the eager and the flex attention paths evaluate alike, and `query_weight()` its LC3.
        embedding: sinusoidal vectors are added to the token embeddings (the vanilla Transformer).
        rotary: queries and keys of self-attention are rotated at their real positions (RoPE).
        per_stack: `config → bool`, one module per stack shared by all its layers (T5, agf_share_across_layers)
            instead of one per attention.
    """

    build: Callable | None = None
    embedding: bool = False
    rotary: bool = False
    per_stack: Callable[[AgfConfig], bool] = _never


POSITION_ENCODING_REGISTRY: dict[str, PositionEncoding] = {
    "agf": PositionEncoding(build=_agf_coefficient, per_stack=lambda config: config.agf_share_across_layers),
    "sinusoidal": PositionEncoding(embedding=True),
    "rope": PositionEncoding(rotary=True),
    "alibi": PositionEncoding(build=lambda config, heads, head_dim, causal: AlibiBias(heads)),
    "kerple_power": PositionEncoding(build=lambda config, heads, head_dim, causal: KerpleBias(heads, "power")),
    "kerple_log": PositionEncoding(build=lambda config, heads, head_dim, causal: KerpleBias(heads, "log")),
    "t5": PositionEncoding(build=_t5_bias, per_stack=lambda config: True),
    "none": PositionEncoding(),
}


def position_encoding_of(config: AgfConfig) -> PositionEncoding:
    return POSITION_ENCODING_REGISTRY[config.position_encoding]


def build_position_module(config: AgfConfig, num_heads: int, head_dim: int, *, causal: bool) -> nn.Module | None:
    """The per-attention (or per-stack) module for `config.position_encoding`; None where attention needs none."""
    build = position_encoding_of(config).build
    return build(config, num_heads, head_dim, causal) if build is not None else None


def build_value_coefficient(config: AgfConfig, num_heads: int, head_dim: int, *, causal: bool) -> nn.Module | None:
    """PCM-V's own coefficient when `pcmv_coefficient="separate"` (LC1·LC2, same switches, no LC3)."""
    if not (config.pcmv and config.pcmv_coefficient == "separate"):
        return None
    return _agf_coefficient(config, num_heads, head_dim, causal, feature_weights=False)


def position_modules(config: AgfConfig, num_heads: int, *, causal: bool, cross: bool = False) -> tuple:
    """(position module, PCM-V value coefficient) of one attention, or of a whole stack when it shares them.

    Ownership has one rule (`shares_positions`): parameters shared by a stack's layers belong to the stack
    (`encoder.position_encoding`, `decoder.cross_position_encoding`, ...) and reach each attention at call time;
    per-layer parameters belong to that layer's attention. Cross-attention has a position term only with
    `agf_cross_attention="relative"`.
    """
    if cross and config.agf_cross_attention == "none":
        return None, None
    head_dim = config.d_model // num_heads
    return (
        build_position_module(config, num_heads, head_dim, causal=causal),
        build_value_coefficient(config, num_heads, head_dim, causal=causal),
    )


def shares_positions(config: AgfConfig, cross: bool = False) -> bool:
    """Whether a stack owns one set of position modules for all its layers (`position_modules`)."""
    if cross:
        return config.agf_cross_attention != "none" and config.agf_share_across_layers
    return position_encoding_of(config).per_stack(config)


def _split_mask(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A bool (True = attend) or additive float mask → (keep, additive part on kept entries or None)."""
    if attention_mask.dtype == torch.bool:
        return attention_mask, None
    keep = attention_mask > torch.finfo(attention_mask.dtype).min / 2
    return keep, attention_mask.float().masked_fill(~keep, 0.0)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_terms: AttentionPositionTerms | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference path. q, k, v (B, H, L, d) → output (B, Lq, H, d), effective weights (B, H, Lq, Lk).

    Order: s = (q·kᵀ·scaling)·c + bias, then the mask, softmax, dropout, ·c_v, ·V. Everything after the matmul is
    float32, so the coefficient never meets a low-precision mask value. Fully masked query rows output 0.
    """
    scores = torch.matmul(query, key.transpose(2, 3))
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32)) * scaling
    value_weight = None
    if position_terms is not None:
        num_heads = query.shape[1]
        head, distances, index = position_terms.distance_table(num_heads)

        def per_score(term: Callable, exp: bool = False) -> torch.Tensor:
            # the term on every (head, distance) pair once, exp'd there if asked, then gathered per score
            table = term(head, distances).float().expand(num_heads, distances.shape[-1])
            return gather_distance_table(torch.exp(table) if exp else table, index)

        coefficient = None
        if position_terms.log_coefficient is not None:
            coefficient = per_score(position_terms.log_coefficient, exp=True)
            scores = scores * coefficient
        if position_terms.bias is not None:
            scores = scores + per_score(position_terms.bias)
        if position_terms.value_log_coefficient is not None:
            if position_terms.value_log_coefficient is position_terms.log_coefficient:
                value_weight = coefficient
            else:
                value_weight = per_score(position_terms.value_log_coefficient, exp=True)
    keep = None
    if attention_mask is not None:
        keep, additive = _split_mask(attention_mask)
        if additive is not None:
            scores = scores + additive
        # finfo.min rather than -inf: a fully masked row stays finite (no NaN gradient) and is zeroed below
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    attn_weights = torch.softmax(scores, dim=-1)
    if keep is not None:
        attn_weights = attn_weights * keep.any(dim=-1, keepdim=True)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    if value_weight is not None:
        attn_weights = attn_weights * value_weight
    attn_output = torch.matmul(attn_weights.to(value.dtype), value)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


@functools.cache
def _compiled_flex_attention() -> Callable:
    return torch.compile(flex_attention, dynamic=False)


def _flex_attention_fn(device: torch.device) -> Callable:
    # the CPU build has no flex backward and its compiled form cannot return the lse (torch 2.13), so
    # CPU runs the unfused eager flex (forward checks only); accelerators get the compiled kernel
    return flex_attention if device.type == "cpu" else _compiled_flex_attention()


def _flex_with_lse(flex: Callable, query, key, value, score_mod, block_mask, scale):
    if AuxRequest is not None:
        out, aux = flex(
            query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True)
        )
        return out, aux.lse
    return flex(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale, return_lse=True)


def flex_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | BlockMask | None,
    scaling: float,
    dropout: float = 0.0,
    position_terms: AttentionPositionTerms | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """FlexAttention path (pytorch.org/docs/stable/nn.attention.flex_attention.html): the same result as `eager_attention_forward`, no score matrix kept.

    AGF is a `score_mod` (score·c + bias, masked entries −inf). PCM-V needs a second pass: with s' the modified
    logits, o = Σ a·c_v·v = exp(lse(s' + log c_v) − lse(s'))·softmax(s' + log c_v)·V; rows with lse = −inf (fully
    masked) get factor 0. Attention dropout is not available here.
    """
    if dropout > 0.0:
        raise ValueError(
            "the flex attention path has no attention dropout; train with attention_dropout=0 or the eager path"
        )
    batch, num_heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    block_mask = attention_mask if isinstance(attention_mask, BlockMask) else None
    keep = additive = None
    if isinstance(attention_mask, torch.Tensor):
        keep, additive = _split_mask(attention_mask)
        keep = keep.expand(batch, num_heads, q_len, kv_len)
        if additive is not None:
            additive = additive.expand(batch, num_heads, q_len, kv_len)
    terms = position_terms
    # plain locals (module-level functions, argument tuples) for Dynamo to guard; see `PositionTerm`
    coefficient_fn = coefficient_args = bias_fn = bias_args = value_fn = value_args = None
    if terms is not None:
        q_pos = terms.query_positions.expand(batch, q_len)
        k_pos = terms.key_positions.expand(batch, kv_len)
        if terms.log_coefficient is not None:
            coefficient_fn, coefficient_args = terms.log_coefficient.fn, terms.log_coefficient.args
        if terms.bias is not None:
            bias_fn, bias_args = terms.bias.fn, terms.bias.args
        if terms.value_log_coefficient is not None:
            value_fn, value_args = terms.value_log_coefficient.fn, terms.value_log_coefficient.args

    def logit_mod(score, b, h, q_idx, kv_idx):
        if terms is not None:
            delta = q_pos[b, q_idx] - k_pos[b, kv_idx]
            if coefficient_fn is not None:
                score = score * torch.exp(coefficient_fn(h, delta, *coefficient_args))
            if bias_fn is not None:
                score = score + bias_fn(h, delta, *bias_args)
        if keep is not None:
            if additive is not None:
                score = score + additive[b, h, q_idx, kv_idx]
            score = torch.where(keep[b, h, q_idx, kv_idx], score, -float("inf"))
        return score

    flex = _flex_attention_fn(query.device)
    if value_fn is None:
        attn_output = flex(query, key, value, score_mod=logit_mod, block_mask=block_mask, scale=scaling)
    else:

        def value_mod(score, b, h, q_idx, kv_idx):
            delta = q_pos[b, q_idx] - k_pos[b, kv_idx]
            return logit_mod(score, b, h, q_idx, kv_idx) + value_fn(h, delta, *value_args)

        # pass 1 only contributes its lse; pass 2 is softmax(s' + log c_v)·V with its own lse
        _, lse = _flex_with_lse(flex, query, key, value, logit_mod, block_mask, scaling)
        attn_output, value_lse = _flex_with_lse(flex, query, key, value, value_mod, block_mask, scaling)
        dead = torch.isneginf(lse)
        # where() before exp(): exp(−inf − (−inf)) is NaN, and a NaN branch would leak into the gradient
        log_ratio = torch.where(dead, torch.zeros_like(lse), value_lse.float() - lse.float())
        ratio = torch.exp(log_ratio).masked_fill(dead, 0.0)  # R_m = Σ_n a_mn·c_mn, (B, H, Lq)
        attn_output = attn_output * ratio[..., None].to(attn_output.dtype)
    return attn_output.transpose(1, 2).contiguous(), None


class AgfAttentionInterface(AttentionInterface):
    """Backends for this file only. The stock sdpa / flash functions cannot apply a multiplicative coefficient, so
    this registry holds only the coefficient-aware functions; "eager" resolves to `eager_attention_forward`."""

    _global_mapping = {"flex_attention": flex_attention_forward}


# the attention backends of this file, under a name of its own (transformers' global registry is
# `ALL_ATTENTION_FUNCTIONS`); `AgfPreTrainedModel._can_set_attn_implementation` says the model dispatches through it
AGF_ATTENTION_FUNCTIONS = AgfAttentionInterface()


class AgfAttention(nn.Module):
    """Multi-head attention (self or cross) with the configured position encoding.

    The positional module is either owned (`position_encoding`, `value_coefficient`) or, when the stack shares one
    set across layers, passed in at call time through `position_modules`.
    """

    def __init__(
        self,
        config: AgfConfig,
        embed_dim: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        is_causal: bool = False,
        is_cross_attention: bool = False,
        layer_idx: int | None = None,
        position_encoding: nn.Module | None = None,
        value_coefficient: nn.Module | None = None,
        pcmv: bool = False,
    ):
        super().__init__()
        self.config = config
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = dropout
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        self.num_key_value_groups = 1
        # RoPE rotates self-attention's queries and keys at their real positions
        rotary = position_encoding_of(config).rotary and not is_cross_attention
        self.rope_theta = config.rope_theta if rotary else None
        self.pcmv = pcmv
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.position_encoding = position_encoding
        self.value_coefficient = value_coefficient

    def _position_terms(self, position_module, value_module, query_positions, key_positions, device):
        if position_module is None:
            return None
        log_coefficient, bias = position_module.logit_terms(device)
        value_log_coefficient = None
        if self.pcmv and log_coefficient is not None:
            value_log_coefficient = (
                value_module.log_coefficient_term() if value_module is not None else log_coefficient
            )
        if log_coefficient is None and bias is None:
            return None
        return AttentionPositionTerms(query_positions, key_positions, log_coefficient, bias, value_log_coefficient)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | BlockMask | None = None,
        query_positions: torch.Tensor | None = None,
        key_positions: torch.Tensor | None = None,
        cache: Cache | None = None,
        position_modules: tuple[nn.Module | None, nn.Module | None] | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, q_len = hidden_states.shape[:2]
        # (B, H, Lq, d)
        query_states = self.q_proj(hidden_states).view(batch, q_len, self.num_heads, self.head_dim).transpose(1, 2)

        is_cross = key_value_states is not None
        is_updated = False
        layer_cache = None
        if cache is not None:
            is_updated = bool(cache.is_updated.get(self.layer_idx)) if is_cross else False
            layer_cache = cache.cross_attention_cache if is_cross else cache.self_attention_cache
        if is_cross and is_updated:
            # the encoder K/V were computed at the first decoding step
            key_states = layer_cache.layers[self.layer_idx].keys
            value_states = layer_cache.layers[self.layer_idx].values
        else:
            current = key_value_states if is_cross else hidden_states
            kv_shape = (batch, current.shape[1], self.num_heads, self.head_dim)
            key_states = self.k_proj(current).view(kv_shape).transpose(1, 2)
            value_states = self.v_proj(current).view(kv_shape).transpose(1, 2)
            if self.rope_theta is not None and not is_cross:
                # new keys sit at the query positions; cached keys were rotated when they were new
                key_states = apply_rotary(key_states, query_positions, self.rope_theta)
            if layer_cache is not None:
                key_states, value_states = layer_cache.update(key_states, value_states, self.layer_idx)
                if is_cross:
                    cache.is_updated[self.layer_idx] = True
        if self.rope_theta is not None and not is_cross:
            query_states = apply_rotary(query_states, query_positions, self.rope_theta)

        position_module, value_module = self.position_encoding, self.value_coefficient
        if position_module is None and position_modules is not None:
            position_module, value_module = position_modules
        feature_weight = position_module.query_weight() if position_module is not None else None  # LC3, (H, d)
        if feature_weight is not None:
            query_states = query_states * feature_weight[None, :, None, :].to(query_states.dtype)
        terms = self._position_terms(
            position_module, value_module, query_positions, key_positions, hidden_states.device
        )

        attention_interface: Callable = AGF_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            scaling=self.scaling,
            dropout=self.dropout if self.training else 0.0,
            position_terms=terms,
        )
        # (B, Lq, H, d)
        if self.pcmv and feature_weight is not None:
            # LC3 on the PCM-V side: o_j = w_j·Σ_n a·c·v_j (the separable form, module docstring)
            attn_output = attn_output * feature_weight[None, None].to(attn_output.dtype)
        attn_output = self.out_proj(attn_output.reshape(batch, q_len, self.embed_dim))
        return attn_output, attn_weights


class _AgfLayer(GradientCheckpointingLayer):
    """What the encoder and decoder blocks share: the self-attention block and the feed-forward block, built and run
    the same way (post-LN, Marian/BART wiring). Parameter names are those of BART / Marian."""

    def _build_self_attention(self, config: AgfConfig, layer_idx: int, heads: int, *, causal: bool, own: bool):
        self.embed_dim = config.d_model
        self.dropout = config.dropout
        position, value = position_modules(config, heads, causal=causal) if own else (None, None)
        self.self_attn = AgfAttention(
            config,
            self.embed_dim,
            heads,
            dropout=config.attention_dropout,
            is_causal=causal,
            layer_idx=layer_idx,
            position_encoding=position,
            value_coefficient=value,
            pcmv=config.pcmv,
        )
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)

    def _build_feed_forward(self, config: AgfConfig, ffn_dim: int):
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.fc1 = nn.Linear(self.embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def _add_and_norm(self, residual: torch.Tensor, block_output: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return norm(residual + F.dropout(block_output, p=self.dropout, training=self.training))

    def _self_attention(self, hidden_states, attention_mask, query_positions, key_positions, **attention_kwargs):
        output, weights = self.self_attn(
            hidden_states,
            attention_mask=attention_mask,
            query_positions=query_positions,
            key_positions=key_positions,
            **attention_kwargs,
        )
        return self._add_and_norm(hidden_states, output, self.self_attn_layer_norm), weights

    def _feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        output = self.activation_fn(self.fc1(hidden_states))
        output = F.dropout(output, p=self.activation_dropout, training=self.training)
        return self._add_and_norm(hidden_states, self.fc2(output), self.final_layer_norm)


class AgfEncoderLayer(_AgfLayer):
    """Post-LN encoder block (Marian/BART wiring); the position encoding lives inside `self_attn`."""

    def __init__(self, config: AgfConfig, layer_idx: int, share_positions: bool):
        super().__init__()
        heads = config.encoder_attention_heads
        self._build_self_attention(config, layer_idx, heads, causal=False, own=not share_positions)
        self._build_feed_forward(config, config.encoder_ffn_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | BlockMask | None = None,
        positions: torch.Tensor | None = None,
        position_modules: tuple | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden_states, attn_weights = self._self_attention(
            hidden_states, attention_mask, positions, positions, position_modules=position_modules
        )
        return self._feed_forward(hidden_states), attn_weights


class AgfDecoderLayer(_AgfLayer):
    r"""Post-LN decoder block (Marian/BART wiring) and where the position terms act::

        hidden_states
         ├─────────────┐
         │         self_attn      a = softmax((q·kᵀ/√d)·c(δ) + causal/padding mask),  o = (a ⊙ c_v)·V
         │             │          c: AGF coefficient (1 for other encodings; + bias for ALiBi/KERPLE/T5)
         (+) ◄─────────┘          c_v: PCM-V only; δ = query − key from real positions, cached keys included
         LN
         ├─────────────┐
         │         encoder_attn   a = softmax(q·kᵀ/√d + source padding mask),  o = a·V
         (+) ◄─────────┘          (·c(δ) and PCM-V only with agf_cross_attention="relative")
         LN
         ├─────────────┐
         │         fc1 → act → fc2
         (+) ◄─────────┘
         LN
         out

    The encoder layer has the self-attention and feed-forward rows only, with no causal mask and with directional
    (±δ) AGF parameters.
    """

    def __init__(self, config: AgfConfig, layer_idx: int, share_positions: bool):
        super().__init__()
        heads = config.decoder_attention_heads
        own = not share_positions
        self._build_self_attention(config, layer_idx, heads, causal=True, own=own)
        cross_position, cross_value = (
            position_modules(config, heads, causal=False, cross=True) if own else (None, None)
        )
        self.encoder_attn = AgfAttention(
            config,
            self.embed_dim,
            heads,
            dropout=config.attention_dropout,
            is_cross_attention=True,
            layer_idx=layer_idx,
            position_encoding=cross_position,
            value_coefficient=cross_value,
            pcmv=config.pcmv and config.agf_cross_attention != "none",
        )
        self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self._build_feed_forward(config, config.decoder_ffn_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | BlockMask | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | BlockMask | None = None,
        query_positions: torch.Tensor | None = None,
        key_positions: torch.Tensor | None = None,
        encoder_positions: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        position_modules: tuple | None = None,
        cross_position_modules: tuple | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        hidden_states, self_weights = self._self_attention(
            hidden_states,
            attention_mask,
            query_positions,
            key_positions,
            cache=cache,
            position_modules=position_modules,
        )
        cross_weights = None
        # run without encoder states (the decoder as a plain LM), there is nothing to cross-attend to: skip the block,
        # as BART / Marian do, instead of letting it attend to the decoder's own states unmasked
        if encoder_hidden_states is not None:
            output, cross_weights = self.encoder_attn(
                hidden_states,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                query_positions=query_positions,
                key_positions=encoder_positions,
                cache=cache,
                position_modules=cross_position_modules,
            )
            hidden_states = self._add_and_norm(hidden_states, output, self.encoder_attn_layer_norm)
        return self._feed_forward(hidden_states), self_weights, cross_weights


class AgfPreTrainedModel(PreTrainedModel):
    """Shared base of the AGF classes: config class, capability flags, weight init and `coefficient_curves`."""

    config_class = AgfConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["AgfEncoderLayer", "AgfDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values", "cache"]
    # eager is the default and the reference; flex_attention is the fused path. sdpa / flash cannot apply a
    # multiplicative coefficient and are not offered.
    _supports_flex_attn = True

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # transformers looks for its own registry's name in the model file; this one dispatches through
        # `AGF_ATTENTION_FUNCTIONS`, so `set_attn_implementation("flex_attention")` works all the same
        return True

    _supports_sdpa = False
    _supports_flash_attn = False

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Initialise every weight; raw parameters only here (transformers skips tensors loaded from a checkpoint).

        | parameter | init |
        |---|---|
        | `nn.Linear` weight / bias | normal(0, `init_std`) / 0 (transformers default) |
        | `nn.Embedding` (`shared`, `embed_tokens`) | normal(0, `init_std`), padding row 0 (transformers default) |
        | `nn.LayerNorm` | weight 1, bias 0 (transformers default) |
        | AGF `radius_raw` ρ | softplus⁻¹(r − ε_r), r log-spaced over heads in [1, 64] |
        | AGF `exponent` k | log-spaced over heads from 2 down to 0.25; 0 with `agf_init="flat"` |
        | AGF `base_raw` β | softplus⁻¹(1), i.e. Base = 1 |
        | AGF `amplitude_raw`, `feature_weight_raw` | 0, i.e. A = w = 1 |
        | KERPLE `bias_a` / `bias_p` | U(0, 1) / U(0, 2) (official code) |
        | T5 `relative_attention_bias` | normal(0, d_model^(−1/2)) (HF T5) |
        """
        super()._init_weights(module)
        if isinstance(module, AgfPositionCoefficient):
            for name, value in module.initial_values().items():
                param = getattr(module, name)
                init.copy_(param, value.to(device=param.device, dtype=param.dtype))
        elif isinstance(module, KerpleBias):
            init.uniform_(module.bias_a, 0.0, 1.0)
            init.uniform_(module.bias_p, 0.0, 2.0)
        elif isinstance(module, T5RelativeBias):
            init.normal_(module.relative_attention_bias.weight, mean=0.0, std=self.config.d_model**-0.5)

    @torch.no_grad()
    def coefficient_curves(
        self, max_distance: int = 64, initial: bool = False
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The learned AGF curves c_h(δ) (LC1·LC2) of every AGF module, for plots and inspection.

        Returns `{module name: (distances (N,), coefficients (H, N))}` in float32 on the CPU. Distances are
        −max_distance … max_distance, or 0 … max_distance for causal decoder self-attention (which never sees the
        future side). LC3 is position-free and not part of the curves. Empty unless `position_encoding="agf"`.
        `initial=True`: the same curves at their initialisation, to show how far training moved them.
        """
        curves = {}
        for name, module in self.named_modules():
            if isinstance(module, AgfPositionCoefficient) and module.has_position_terms:
                low = 0 if module.causal else -max_distance
                device = next(module.parameters()).device
                distances = torch.arange(low, max_distance + 1, device=device)
                curves[name] = (distances.cpu(), module.coefficient(distances, initial=initial).float().cpu())
        return curves


class AgfScaledWordEmbedding(nn.Embedding):
    """Token embedding times `embed_scale` (√d_model with `scale_embedding`), applied inside the module, so that
    `inputs_embeds = model.get_input_embeddings()(input_ids)` gives the same outputs as `input_ids` (as BART / Marian's
    scaled embeddings do). One module is shared by the encoder, the decoder and (tied) the LM head."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, embed_scale: float = 1.0):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids) * self.embed_scale


def _embedding(config: AgfConfig) -> AgfScaledWordEmbedding:
    scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    return AgfScaledWordEmbedding(config.vocab_size, config.d_model, config.pad_token_id, embed_scale=scale)


class AgfEncoder(AgfPreTrainedModel):
    """Transformer encoder: token embeddings (+ sinusoidal PE for the vanilla baseline) and `encoder_layers` blocks."""

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.embed_tokens = _embedding(config)
        shared = shares_positions(config)
        self.position_encoding, self.value_coefficient = (
            position_modules(config, config.encoder_attention_heads, causal=False) if shared else (None, None)
        )
        self.layers = nn.ModuleList(
            [AgfEncoderLayer(config, layer_idx=i, share_positions=shared) for i in range(config.encoder_layers)]
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple:
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of `input_ids` and `inputs_embeds`")
        check_inputs("AgfEncoder", input_ids, inputs_embeds, attention_mask, self.config.vocab_size)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        batch, length = inputs_embeds.shape[:2]
        positions = positions_from_mask(attention_mask, batch, length, inputs_embeds.device)
        hidden_states = inputs_embeds
        if position_encoding_of(self.config).embedding:
            hidden_states = hidden_states + sinusoidal_position_embedding(positions, self.config.d_model).to(
                hidden_states.dtype
            )
        hidden_states = F.dropout(hidden_states, p=self.config.dropout, training=self.training)
        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        position_modules = (self.position_encoding, self.value_coefficient)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, attn_weights = layer(
                hidden_states, mask, positions=positions, position_modules=position_modules
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (attn_weights,)
        output = BaseModelOutput(
            last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=all_attentions
        )
        return output if return_dict else output.to_tuple()


class AgfDecoder(AgfPreTrainedModel):
    """Transformer decoder: causal self-attention with a KV cache, cross-attention over the encoder output."""

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.embed_tokens = _embedding(config)
        heads = config.decoder_attention_heads
        shared = shares_positions(config)
        self.position_encoding, self.value_coefficient = (
            position_modules(config, heads, causal=True) if shared else (None, None)
        )
        self.cross_position_encoding, self.cross_value_coefficient = (
            position_modules(config, heads, causal=False, cross=True)
            if shares_positions(config, cross=True)
            else (None, None)
        )
        self.layers = nn.ModuleList(
            [AgfDecoderLayer(config, layer_idx=i, share_positions=shared) for i in range(config.decoder_layers)]
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple:
        """`attention_mask` is the 2D decoder padding mask over past + current tokens; with it, left-padded decoder
        prompts get their real positions. Without it positions continue from the cache length. `position_ids`
        override the query positions (keys then take them too when there is no cache)."""
        cache = merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if self.training and any(layer.gradient_checkpointing for layer in self.layers):
            # recomputing a layer in backward would append its keys to the cache a second time
            use_cache = False
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of decoder `input_ids` and `inputs_embeds`")
        given_past = cache.get_seq_length() if use_cache and cache is not None else 0
        check_inputs("AgfDecoder", input_ids, inputs_embeds, attention_mask, self.config.vocab_size, given_past)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        batch, q_len = inputs_embeds.shape[:2]
        device = inputs_embeds.device

        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        elif cache is not None and not isinstance(cache, EncoderDecoderCache):
            cache = EncoderDecoderCache(cache, DynamicCache(config=self.config))
        if not use_cache:
            cache = None
        self_cache = cache.self_attention_cache if cache is not None else None
        past_length = self_cache.get_seq_length() if self_cache is not None else 0

        if attention_mask is None:
            attention_mask = torch.ones(batch, past_length + q_len, dtype=torch.long, device=device)
        key_positions = positions_from_mask(attention_mask, batch, past_length + q_len, device)
        if position_ids is not None:
            query_positions = position_ids.to(device).expand(batch, q_len)
            key_positions = torch.cat([key_positions[:, :past_length], query_positions], dim=-1)
        else:
            query_positions = key_positions[:, past_length:]
        encoder_positions = None
        if encoder_hidden_states is not None:
            encoder_positions = positions_from_mask(
                encoder_attention_mask, batch, encoder_hidden_states.shape[1], device
            )

        hidden_states = inputs_embeds
        if position_encoding_of(self.config).embedding:
            hidden_states = hidden_states + sinusoidal_position_embedding(query_positions, self.config.d_model).to(
                hidden_states.dtype
            )
        hidden_states = F.dropout(hidden_states, p=self.config.dropout, training=self.training)

        causal_mask = create_causal_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, **{CACHE_NAME: self_cache}
        )
        cross_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        position_modules = (self.position_encoding, self.value_coefficient)
        cross_position_modules = (self.cross_position_encoding, self.cross_value_coefficient)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_self_attentions = () if output_attentions else None
        all_cross_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, self_weights, cross_weights = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,
                encoder_attention_mask=cross_mask,
                query_positions=query_positions,
                key_positions=key_positions,
                encoder_positions=encoder_positions,
                cache=cache,
                position_modules=position_modules,
                cross_position_modules=cross_position_modules,
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_self_attentions += (self_weights,)
                all_cross_attentions += (cross_weights,)
        output = BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states,
            attentions=all_self_attentions,
            cross_attentions=all_cross_attentions,
            **{CACHE_NAME: cache},
        )
        return output if return_dict else output.to_tuple()


class AgfModel(AgfPreTrainedModel):
    """Encoder–decoder body without the LM head; `shared` is the one embedding of the shared vocabulary.

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import AgfConfig, AgfModel
    >>> config = AgfConfig(vocab_size=99, d_model=32, encoder_ffn_dim=37, decoder_ffn_dim=37, encoder_layers=2,
    ...                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4)
    >>> model = AgfModel(config).eval()
    >>> out = model(input_ids=torch.tensor([[5, 6, 7, 2]]), decoder_input_ids=torch.tensor([[1, 8]]))
    >>> tuple(out.last_hidden_state.shape)
    (1, 2, 32)

    ```
    """

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.shared = _embedding(config)
        self.encoder = AgfEncoder(config)
        self.decoder = AgfDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    def get_encoder(self, modality: str | None = None) -> AgfEncoder:
        return self.encoder

    def get_decoder(self) -> AgfDecoder:
        return self.decoder

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput | tuple:
        cache = merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            inputs_embeds=decoder_inputs_embeds,
            position_ids=decoder_position_ids,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **{CACHE_NAME: cache},
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            **{CACHE_NAME: decoder_outputs[CACHE_NAME] if CACHE_NAME in decoder_outputs else None},
        )
        return output if return_dict else output.to_tuple()


class AgfForConditionalGeneration(AgfPreTrainedModel, GenerationMixin):
    """AGF translation model with a tied LM head; trains with cross-entropy on unshifted labels, generates with
    greedy, sampling or beam search through `generate()`.

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import AgfConfig, AgfForConditionalGeneration
    >>> config = AgfConfig(vocab_size=99, d_model=32, encoder_ffn_dim=37, decoder_ffn_dim=37, encoder_layers=2,
    ...                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, pcmv=True)
    >>> model = AgfForConditionalGeneration(config)
    >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 2]]), "labels": torch.tensor([[8, 9, 2]])}
    >>> loss = model(**batch).loss  # decoder inputs are the labels shifted right behind decoder_start_token_id
    >>> generated = model.eval().generate(batch["input_ids"], max_new_tokens=5, num_beams=2)

    ```
    """

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.model = AgfModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def get_encoder(self, modality: str | None = None) -> AgfEncoder:
        return self.model.encoder

    def get_decoder(self) -> AgfDecoder:
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: Cache | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            Target ids aligned with the decoder outputs (not shifted again); -100 is ignored. Without
            `decoder_input_ids`, the decoder reads the labels shifted right behind `decoder_start_token_id`.
        num_items_in_batch (`int` or `torch.Tensor`, *optional*):
            Label tokens in the whole (accumulated, all-process) batch, passed by the Trainer: the summed loss is
            divided by it so gradient accumulation matches one large batch. Otherwise the mean over this batch's
            label tokens.
        """
        cache = merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            decoder_position_ids=decoder_position_ids,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **{CACHE_NAME: cache},
        )
        logits = self.lm_head(outputs.last_hidden_state)

        loss = None
        if labels is not None:
            labels = labels.to(logits.device)
            loss = F.cross_entropy(
                logits.float().view(-1, logits.shape[-1]),
                labels.view(-1),
                ignore_index=-100,
                reduction="sum",
                label_smoothing=self.config.label_smoothing,
            )
            if num_items_in_batch is None:
                num_items_in_batch = (labels != -100).sum().clamp(min=1)
            if isinstance(num_items_in_batch, torch.Tensor):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch

        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            **{CACHE_NAME: outputs[CACHE_NAME] if CACHE_NAME in outputs else None},
        )
        return output if return_dict else output.to_tuple()


__all__ = ["AgfPreTrainedModel", "AgfModel", "AgfForConditionalGeneration"]
