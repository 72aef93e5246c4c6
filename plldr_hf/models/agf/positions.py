"""Position handling of the AGF family: the maths of every encoding, the modules holding their parameters, and the
position data a stack computes once per forward.

`position_encodings.POSITION_ENCODINGS` names the encodings and says what each does; this file builds them.

Per forward call, each stack (encoder; decoder self- and cross-attention) makes one `PositionContext`: the real
positions of queries and keys (from the attention mask, so padding and caching do not shift them), the RoPE angles,
and the table of distinct distances the eager path evaluates the terms on. Position parameters shared by a stack's
layers (`agf_share_across_layers`, T5) are evaluated once into `AttentionPositionTerms`, which the stack hands each
layer as data, as Llama hands its layers (cos, sin) and T5 its `position_bias`; per-layer parameters are evaluated
by their own attention. Either way attention gets tensors and `PositionTerm`s, never modules.

Symbols (paper → code):

| symbol | meaning | code |
|---|---|---|
| δ = m − n | signed distance, query minus key position (δ > 0: key in the past) | `delta` |
| σ | side of δ: 0 past/self (δ ≥ 0), 1 future (δ < 0) | `side` |
| r_{h,σ} | LC1 radius, softplus(ρ) + ε_r | `AgfPositionCoefficient.radius_raw` (ρ), `agf_min_radius` (ε_r) |
| k_{h,σ} | LC1 exponent, unconstrained (c > 0 for any k; k = 0 gives c ≡ 1), or k = softplus(κ) > 0 with `agf_positive_exponent` | `AgfPositionCoefficient.exponent` / `.exponent_raw` |
| Base_{h,σ} | LC1 scale, softplus(β) or fixed 1 | `AgfPositionCoefficient.base_raw` (β) |
| A_h(δ) | LC2 amplitude, exp(α), δ clipped to ±D_max | `AgfPositionCoefficient.amplitude_raw` (α = log A) |
| w_{h,j} | LC3 per-feature weight, exp(ω) | `AgfPositionCoefficient.feature_weight_raw` (ω = log w) |
| c_h(δ) | Base·(1 + |δ|/r)^(−k)·A(δ) (arXiv 2603.04805) | `agf_log_coefficient()` (log c) |
| μ_h | ALiBi slope (arXiv 2108.12409) | `alibi_slopes()` |
| a_h, p_h | KERPLE parameters (arXiv 2205.09921) | `KerpleBias.bias_a`, `KerpleBias.bias_p` (official names) |
| E[bucket, h] | T5 bias table (arXiv 1910.10683) | `T5RelativeBias.relative_attention_bias` |

This file is remote code (copied next to the weights by `save_pretrained`): it imports only torch and its siblings.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_agf import AgfConfig
from .position_encodings import POSITION_ENCODINGS, PositionEncodingInfo
from .rotary import rotary_cos_sin


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
class PositionContext:
    """The position data of one attention kind (encoder self, decoder self or cross) for one forward call, made once
    by the stack and shared by all its layers: tensors without gradient.

    Attributes:
        query_positions: (B, Lq) real positions of the queries.
        key_positions: (B, Lk) real positions of the keys.
        rotary: (cos, sin) of the query positions, each (B, 1, Lq, d/2), when RoPE rotates this attention's queries
            and keys (new keys sit at the query positions; cached keys were rotated when they were new).
    """

    query_positions: torch.Tensor
    key_positions: torch.Tensor
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    _table: tuple | None = field(default=None, repr=False)

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
        index_add into the table instead of an accumulating scatter over every score. Computed on first use and
        kept: every layer of the stack reuses it (one device sync per forward for δ_min, δ_max).
        """
        if self._table is None:
            delta = self.query_positions[:, None, :, None] - self.key_positions[:, None, None, :]
            low, high = (int(value) for value in delta.aminmax()) if delta.numel() else (0, 0)
            distances = torch.arange(low, high + 1, device=delta.device)[None, :]
            self._table = (distances, delta - low)
        distances, index = self._table
        return torch.arange(num_heads, device=distances.device)[:, None], distances, index


@dataclass
class AttentionPositionTerms:
    """What an attention function needs to apply a relative position encoding.

    The terms take `(head, delta)` index tensors (broadcastable, or scalars inside a flex `score_mod`) and return
    float32 values of the same broadcast shape, so the eager and the flex paths evaluate one formula.

    Attributes:
        context: the positions (`PositionContext`).
        log_coefficient: log c; the scaled logit is multiplied by c = exp(log c) before the mask (AGF).
        bias: added to the scaled logit (ALiBi, KERPLE, T5).
        value_log_coefficient: log c_v; the probabilities are multiplied by c_v after the softmax (PCM-V). The same
            object as `log_coefficient` when PCM-V shares the AGF coefficient.
        feature_weight: LC3 (H, d_head), scaling the query (and, with PCM-V, the head output), or None.
    """

    context: PositionContext
    log_coefficient: PositionTerm | None = None
    bias: PositionTerm | None = None
    value_log_coefficient: PositionTerm | None = None
    feature_weight: torch.Tensor | None = None

    @property
    def query_positions(self) -> torch.Tensor:
        return self.context.query_positions

    @property
    def key_positions(self) -> torch.Tensor:
        return self.context.key_positions

    def grid(self, num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.context.grid(num_heads)

    def distance_table(self, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.context.distance_table(num_heads)


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

    @classmethod
    def from_config(cls, config: AgfConfig, num_heads: int, head_dim: int, causal: bool, feature_weights=None):
        """The coefficient the config describes; `feature_weights=False` for PCM-V's separate one (no LC3)."""
        return cls(
            num_heads,
            head_dim,
            power_law=config.agf_power_law,
            directional=config.agf_directional,
            learn_base=config.agf_learn_base,
            positive_exponent=config.agf_positive_exponent,
            min_radius=config.agf_min_radius,
            init_mode=config.agf_init,
            amplitude_max_distance=config.agf_amplitude_max_distance,
            feature_weights=config.agf_feature_weights if feature_weights is None else feature_weights,
            causal=causal,
        )

    @staticmethod
    def shared_by_stack(config: AgfConfig) -> bool:
        return config.agf_share_across_layers

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        *,
        power_law: bool = True,
        directional: bool = True,
        learn_base: bool = False,
        positive_exponent: bool = False,
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
        self.positive_exponent = positive_exponent
        self.min_radius = min_radius
        self.init_mode = init_mode
        self.amplitude_max_distance = amplitude_max_distance
        self.causal = causal
        sides = 2 if directional else 1
        if power_law:
            self.radius_raw = nn.Parameter(torch.empty(num_heads, sides))
            # k itself, or κ of k = softplus(κ) under the k > 0 constraint (another name: checkpoints don't mix)
            if positive_exponent:
                self.exponent_raw = nn.Parameter(torch.empty(num_heads, sides))
            else:
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
            if self.positive_exponent:
                values["exponent_raw"] = (exponent + torch.log(-torch.expm1(-exponent)))[:, None].expand(-1, sides)
            else:
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
            exponent = F.softplus(self.exponent_raw.float()) if self.positive_exponent else self.exponent.float()
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

    @staticmethod
    def shared_by_stack(config: AgfConfig) -> bool:
        return False

    def bias_term(self, device=None) -> PositionTerm:
        raise NotImplementedError

    def logit_terms(self, device=None) -> tuple[PositionTerm | None, PositionTerm | None]:
        return None, self.bias_term(device)

    def query_weight(self) -> torch.Tensor | None:
        return None


class AlibiBias(_PositionBias):
    """ALiBi (arXiv 2108.12409): bias −μ_h·|δ|, fixed slopes; the symmetric form covers the bidirectional encoder."""

    @classmethod
    def from_config(cls, config: AgfConfig, num_heads: int, head_dim: int, causal: bool) -> "AlibiBias":
        return cls(num_heads)

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

    @classmethod
    def from_config(cls, config: AgfConfig, num_heads: int, head_dim: int, causal: bool) -> "KerpleBias":
        # "kerple_power" / "kerple_log"
        return cls(num_heads, config.position_encoding.removeprefix("kerple_"))

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

    @classmethod
    def from_config(cls, config: AgfConfig, num_heads: int, head_dim: int, causal: bool) -> "T5RelativeBias":
        return cls(
            num_heads, config.relative_attention_num_buckets, config.relative_attention_max_distance, not causal
        )

    @staticmethod
    def shared_by_stack(config: AgfConfig) -> bool:
        # one table per stack, as in T5
        return True

    def __init__(self, num_heads: int, num_buckets: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def bias_term(self, device=None) -> PositionTerm:
        table = self.relative_attention_bias.weight.float()  # (num_buckets, H)
        return PositionTerm(t5_bias, (table, self.bidirectional, self.num_buckets, self.max_distance))


# the module class of each position encoding that has an attention term (`PositionEncodingInfo.term`); whether a
# stack shares one instance for all its layers is the class's own rule (`shared_by_stack`)
TERM_MODULES: dict[str, type[nn.Module]] = {
    "agf": AgfPositionCoefficient,
    "alibi": AlibiBias,
    "kerple_power": KerpleBias,
    "kerple_log": KerpleBias,
    "t5": T5RelativeBias,
}


def position_encoding_of(config: AgfConfig) -> PositionEncodingInfo:
    """What `config.position_encoding` does (`position_encodings.POSITION_ENCODINGS`)."""
    return POSITION_ENCODINGS[config.position_encoding]


def position_modules(config: AgfConfig, num_heads: int, *, causal: bool, cross: bool = False) -> tuple:
    """(position module, PCM-V value coefficient) of one attention, or of a whole stack when it shares them.

    Ownership has one rule (`shares_positions`): parameters shared by a stack's layers belong to the stack
    (`encoder.position_encoding`, `decoder.cross_position_encoding`, ...), which evaluates them once per forward;
    per-layer parameters belong to that layer's attention. Cross-attention has a position term only with
    `agf_cross_attention` "relative" or "normalized". PCM-V's own coefficient exists with `pcmv_coefficient="separate"`.
    """
    if cross and config.agf_cross_attention == "none":
        return None, None
    head_dim = config.d_model // num_heads
    term_class = TERM_MODULES.get(config.position_encoding)
    module = term_class.from_config(config, num_heads, head_dim, causal) if term_class is not None else None
    value = None
    if config.pcmv and config.pcmv_coefficient == "separate":
        value = AgfPositionCoefficient.from_config(config, num_heads, head_dim, causal, feature_weights=False)
    return module, value


def shares_positions(config: AgfConfig, cross: bool = False) -> bool:
    """Whether a stack owns one set of position modules for all its layers (`position_modules`)."""
    if cross:
        return config.agf_cross_attention != "none" and config.agf_share_across_layers
    term_class = TERM_MODULES.get(config.position_encoding)
    return term_class is not None and term_class.shared_by_stack(config)


def position_terms(modules: tuple, context: PositionContext, pcmv: bool) -> AttentionPositionTerms | None:
    """The terms of (position module, value coefficient) on `context`, or None where attention has none."""
    position_module, value_module = modules
    if position_module is None:
        return None
    log_coefficient, bias = position_module.logit_terms(context.query_positions.device)
    value_log_coefficient = None
    if pcmv and log_coefficient is not None:
        value_log_coefficient = value_module.log_coefficient_term() if value_module is not None else log_coefficient
    feature_weight = position_module.query_weight()
    if log_coefficient is None and bias is None and feature_weight is None:
        return None
    return AttentionPositionTerms(context, log_coefficient, bias, value_log_coefficient, feature_weight)


def self_attention_context(config: AgfConfig, query_positions, key_positions, num_heads: int) -> PositionContext:
    """The `PositionContext` of a stack's self-attention: positions, and the RoPE angles when `rope` is on."""
    rotary = None
    if position_encoding_of(config).rotary:
        rotary = rotary_cos_sin(query_positions, config.d_model // num_heads, config)
    return PositionContext(query_positions, key_positions, rotary)


# the scale of `agf_cross_attention="normalized"`: distances in percent of the source length
NORMALIZED_CROSS_SCALE = 100


def cross_attention_context(
    config: AgfConfig, query_positions: torch.Tensor, encoder_positions: torch.Tensor
) -> PositionContext:
    """The `PositionContext` of cross-attention: target positions i against source positions j.

    With `agf_cross_attention="normalized"` both are rescaled to percent of the row's source length S (its real
    tokens, from the padding-aware `encoder_positions`), so δ = round(100·i/S) − round(100·j/S) approximates
    100·|i/T − j/S| with the unknown target length T taken as S. Integer positions keep the distance table, the
    flex path and the KV cache as they are for every other attention.
    """
    if config.agf_cross_attention != "normalized":
        return PositionContext(query_positions, encoder_positions)
    source_length = (encoder_positions.amax(dim=-1, keepdim=True) + 1).double()

    def scaled(positions):
        return torch.round(NORMALIZED_CROSS_SCALE * positions.double() / source_length).long()

    return PositionContext(scaled(query_positions), scaled(encoder_positions))


def add_absolute_positions(config: AgfConfig, embeddings: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The token embeddings plus sinusoidal position vectors when the encoding adds them (vanilla) or the config asks
    for them on top of a relative scheme (`absolute_positions`), else unchanged."""
    if not (position_encoding_of(config).embedding or config.absolute_positions):
        return embeddings
    return embeddings + sinusoidal_position_embedding(positions, config.d_model).to(embeddings.dtype)
