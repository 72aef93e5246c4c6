"""PLDR-LLM: a decoder-only LM with Power Law Graph Attention (PLGA), in the released checkpoint format.

Papers: arXiv 2410.16703 (PLDR-LLM), 2502.13502 (KV-cache + G-cache), 2603.23539 (self-organised criticality).
Spec: `shared/spec/pldr_llm.md`; this file implements the v51 ("v510") architecture.

Notable features (what differs from a standard decoder):
- Per layer and head a "metric learner" maps the Gram matrix of the rotated queries, A0 = q_rotᵀ·q_rot over all S
  positions of the call (no mask, no 1/S), to a d×d operator G_LM; scores are (q_rot·G_LM)·k_rotᵀ/√d. G_LM = I is
  exactly scaled-dot-product attention, so any stock kernel runs PLGA with the query q' = q_rot·G_LM.
- Post-LN layers, GLU feed-forward, biases on every Linear, embeddings scaled by √D then LayerNorm, no final norm,
  untied LM head `final_layer` with bias.
- Two RoPE conventions selected by `reference_rope`: interleaved pairs (v51/SOC) or NeoX `rotate_half` (v52).
- The PLGA maths (Gram matrix, metric learner, power law, G) runs in float32 whatever the model dtype.
- G-cache (reference semantics): with a cache, each layer computes G from the prompt at prefill and reuses it for
  every decode step; without a cache G is recomputed from the whole input. The state lives in the cache layer
  (`PldrllmCacheLayer`), so it follows beam reordering; `cache_first_G` keeps only batch row 0's G.
- Fixed G: `custom_G_type` (v51G ablation) or a collapsed model keep one G per layer and head in the persistent
  buffer `decoder.past_G_values` [L, 3, 1, H, d, d] (slots A, A_LM, G_LM); the metric learner is skipped.
- The DAG regulariser on A_LM, A_P, G_LM is computed from each layer's state (`dag_terms`; the state is made from
  the PLGA tensors as `plgatt_layer` reads them, so PEFT adapters on them count) and added to the loss with the
  token-fraction weight that keeps gradient accumulation and DDP exact (`hf_integration.md` §10.2).

The PLGA maths are pure functions, each step in one place: `gram_matrix` (A0), `metric_learner` (A),
`power_law_graph` (A_LM, A_P, G_LM as a `PlgaState`), `power_law` (A_P alone), `dag_terms`. `PldrllmAttention`
chooses where the state comes from: the fixed-G buffer, the G-cache, or `deductive_outputs` (the learned path);
`PlgaCall` carries what one forward call tells every layer (padding weights, packed sequences, DAG form).

Symbol table (paper → meaning → released name):

| symbol   | meaning                                          | shape        | released name                       |
|----------|--------------------------------------------------|--------------|-------------------------------------|
| Wq,Wk,Wv | query/key/value projections                      | [D, D] + [D] | `mha1.wq`, `mha1.wk`, `mha1.wv`     |
| Wo       | output projection                                | [D, D] + [D] | `mha1.dense`                        |
| γ, β     | LayerNorm over the rows of the Gram matrix A0    | [d]          | `mha1.layernorm1`                   |
| GLU, LN  | residual metric-learner units (R units × n GLUs) | d→a→d        | `mha1.reslayerAs.r.denseAs.k.gluw*` |
| W, b     | A_LM = iSwiGLU(W·A + b) + ε                      | [H, d, d]    | `plgatt_layer.Wlst`, `.blst`        |
| P        | power-law exponents, A_P = A_LM^∘P               | [H, d, d]    | `plgatt_layer.pwlst`                |
| a, b_a   | G_LM = a·A_P + b_a                               | [H, d, d]    | `plgatt_layer.alst`, `.balst`       |
| A        | metric tensor (metric-learner output)            | [B, H, d, d] | `pldr_attentions[l][0]`             |
| A_LM     | positive operator                                | [B, H, d, d] | `pldr_attentions[l][1]`             |
| A_P      | power-law operator                               | [B, H, d, d] | `pldr_attentions[l][2]`             |
| G_LM     | learned bilinear form of the scores              | [B, H, d, d] | `pldr_attentions[l][3]`             |

This file is copied next to the weights by `save_pretrained` (remote code): it imports only torch, transformers
(public names) and `configuration_pldrllm`.
"""

import copy
import functools
import inspect
import math
import warnings
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .configuration_pldrllm import PldrllmConfig


# version shim: transformers 5.24 renamed the cache keyword and output field `past_key_values` -> `cache`
# (5.23 uses `past_key_values`; the old name is deprecated until 5.40). Forward accepts both spellings; outputs
# subclass the stock output classes and fill whichever field this version has.
_CACHE_KWARG = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def _merge_cache_kwargs(cache: Cache | None, past_key_values: Cache | None, owner: str) -> Cache | None:
    """One cache from either spelling; the old one warns where transformers deprecates it, as in-tree models do."""
    if past_key_values is not None:
        if cache is not None and cache is not past_key_values:
            raise ValueError(f"{owner}: pass the cache as `cache` or `past_key_values`, not both")
        if _CACHE_KWARG == "cache":
            warnings.warn(
                f"`past_key_values` is deprecated and will be removed in version 5.40.0 for `{owner}`. "
                "Use `cache` instead.",
                FutureWarning,
                stacklevel=3,
            )
    return cache if cache is not None else past_key_values


# ε added to A_LM so that it is entrywise positive and the power step A_LM^P is defined (reference, hard-coded)
A_LM_EPS = 1e-9
# d×d matrices per block of the metric learner on the module path (`metric_learner`): 32 matrices × 64 rows keep a
# GLU's 170-wide activations (1.4 MB) near the core; unblocked, the 110M scoring forward (batch 16 × 32, no cache)
# is 1.8× slower on a 2-core CPU (issue 9, `python -m benchmarks run --only scoring`)
METRIC_LEARNER_BLOCK = 32
# rows per block of the fused path (`_FusedResidualUnits`) on a CPU: a block's d-wide input and two 170-wide GLU
# activations (1024 × (64 + 2·170) floats ≈ 1.6 MB) stay near the core between the GEMMs and their elementwise
# epilogues, and a block is large enough that Python's per-op overhead stays small (issue 17: 256, 512, 1024 and
# 2048 rows measured at the 110M training and scoring shapes; 1024 was best or level with the best for both)
FUSED_BLOCK_ROWS = 1024


@dataclass
class PldrllmModelOutput(BaseModelOutputWithPast):
    """Output of `PldrllmModel`: the stock fields plus the PLDR ones.

    `pldr_attentions[l]` is `(A, A_LM, A_P, G_LM)` of layer l, each (B or 1, H, d, d), when requested with
    `output_pldr_attentions=True`; `dag_losses` (N, 3) holds the DAG values of (A_LM, A_P, G_LM) per sequence (N =
    B, or the number of sequences of a packed batch),
    averaged over layers and heads, when they were computed.
    """

    pldr_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None
    dag_losses: torch.FloatTensor | None = None


@dataclass
class PldrllmCausalLMOutput(CausalLMOutputWithPast):
    """Output of `PldrllmForCausalLM`: `loss = lm_loss + Σ weight·dag_losses` (token-weighted under Trainer), with
    the cross-entropy `lm_loss` and the unweighted `dag_losses` (3,) of (A_LM, A_P, G_LM), averaged over layers,
    batch items and heads, also returned."""

    pldr_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None
    lm_loss: torch.FloatTensor | None = None
    dag_losses: torch.FloatTensor | None = None


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the RoPE angles p·θ_i, θ_i = base^(−2i/d), in float32: (B, 1, S, d/2) each.

    Computed per call from the positions instead of a precomputed buffer, so loading from the meta device can never
    leave an uninitialised table (the NaN bug of the released remote code on transformers 5.x).
    """
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=position_ids.device).float() / head_dim))
    angles = position_ids.float()[:, None, :, None] * inv_freq
    return angles.cos(), angles.sin()


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """v51 / torchtune convention: rotate the pairs (x[2i], x[2i+1]) by p·θ_i; float32 maths, input dtype out."""
    x_pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = x_pairs[..., 0], x_pairs[..., 1]
    rotated = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)
    return rotated.flatten(-2).type_as(x)


def apply_rope_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """v52 / NeoX convention: rotate the pairs (x[i], x[i + d/2]), i.e. x·cos + rotate_half(x)·sin."""
    x_float = x.float()
    x1, x2 = x_float.chunk(2, dim=-1)
    cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    return (x_float * cos + torch.cat((-x2, x1), dim=-1) * sin).type_as(x)


def _linear_fp32(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    # call the module itself when it already is float32, so PEFT wrappers on it stay active
    if layer.weight.dtype == torch.float32:
        return layer(x)
    bias = None if layer.bias is None else layer.bias.float()
    return F.linear(x, layer.weight.float(), bias)


def _layer_norm_fp32(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    if norm.weight.dtype == torch.float32:
        return norm(x)
    return F.layer_norm(x, norm.normalized_shape, norm.weight.float(), norm.bias.float(), norm.eps)


def iswiglu(x: torch.Tensor) -> torch.Tensor:
    """iSwiGLU(x) = x·silu(x) = x²·σ(x) ≥ 0: SwiGLU with identity weights and no bias."""
    return x * F.silu(x)


class _LogMeanTraceExp(torch.autograd.Function):
    """ln(tr(e^X) / d) for a batch of d×d matrices X ≥ 0 (entrywise): overflow-safe, accurate near 0, and with a
    closed-form gradient.

    Scaling and squaring: z = X / 2^s with ‖z‖∞ ≤ 1/2, a degree-8 Taylor polynomial (truncation < 1e-8, below
    float32 resolution), then s squarings. Every term is ≥ 0, so nothing cancels.
    - ‖X‖∞ ≤ 60: carry W = e^X − I (W ← W² + 2W when squaring), so ln(tr e^X / d) = log1p(tr W / d) stays accurate
      when it is tiny (the DAG value of a near-acyclic matrix); e^60 is far below the float32 limit.
    - larger: carry Y = e^X / R, dividing by the largest entry r after each squaring (ln R ← 2 ln R + ln r), so
      nothing overflows: ln(tr e^X / d) = ln R + ln(tr Y / d). Values of order 10³ (trained checkpoints) are fine.
    Backward: ∂ ln tr e^X / ∂X = (e^X)ᵀ / tr e^X, available from W or Y, instead of differentiating through a matrix
    exponential (whose backward takes the exponential of a 2d × 2d block matrix).
    """

    TAYLOR_DEGREE = 8
    DIRECT_LIMIT = 60.0

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1]
        norm = x.sum(dim=-1).amax().item()
        squarings = max(0, math.ceil(math.log2(2 * norm))) if norm > 0.5 else 0
        z = x / 2**squarings
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        # Horner for e^z − I = z(I + z/2(I + z/3(… (I + z/8))))
        w = eye + z / _LogMeanTraceExp.TAYLOR_DEGREE
        for k in range(_LogMeanTraceExp.TAYLOR_DEGREE - 1, 1, -1):
            w = eye + (z @ w) / k
        w = z @ w
        if norm <= _LogMeanTraceExp.DIRECT_LIMIT:
            for _ in range(squarings):
                w = w @ w + 2 * w
            excess = w.diagonal(dim1=-2, dim2=-1).sum(-1)
            exp_x, trace = w + eye, excess + d
            out = torch.log1p(excess / d)
        else:
            exp_x = w + eye
            log_scale = torch.zeros(x.shape[:-2], dtype=x.dtype, device=x.device)
            for _ in range(squarings):
                exp_x = exp_x @ exp_x
                peak = exp_x.amax(dim=(-2, -1))
                exp_x = exp_x / peak[..., None, None]
                log_scale = 2 * log_scale + peak.log()
            trace = exp_x.diagonal(dim1=-2, dim2=-1).sum(-1)
            out = log_scale + torch.log(trace / d)
        ctx.save_for_backward(exp_x, trace)
        return out

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        exp_x, trace = ctx.saved_tensors
        return exp_x.mT * (grad_output / trace)[..., None, None]


def dag_values(m: torch.Tensor, form: str = "log_ratio") -> torch.Tensor:
    """DAG value of each d×d matrix in `m` (..., d, d) → (...), float32.

    `"notears"`: h(M) = tr(exp(M∘M)) − d. `"log_ratio"` (the reference code): |ln(tr(exp(M∘M)) / d)|. Both go
    through the overflow-safe, accurate ln(tr e^X / d) of `_LogMeanTraceExp`; log-ratio values of order 10³ (seen
    in trained checkpoints) are finite, while the NOTEARS value e^1000 is not representable and comes out inf.
    """
    d = m.shape[-1]
    log_ratio = _LogMeanTraceExp.apply(m.float().square())
    if form == "log_ratio":
        return log_ratio.abs()
    if form == "notears":
        return d * torch.expm1(log_ratio)
    raise ValueError(f"unknown DAG loss form {form!r}; expected 'log_ratio' or 'notears'")


def dag_loss(m: torch.Tensor, form: str = "log_ratio") -> torch.Tensor:
    """`dag_values` averaged over every leading axis (batch items, heads, ...)."""
    return dag_values(m, form).mean()


class PldrllmCacheLayer(DynamicLayer):
    """A `DynamicLayer` (K, V) that also holds the layer's G-cache, a `PlgaState` of tensors (B or 1, H, d, d).

    Keeping the G state in the cache layer (not on the model) makes it follow beam reordering, batch expansion and
    selection, and resets it with the cache (`hf_integration.md` §6.2).
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pldr_state: PlgaState | None = None

    def reset(self) -> None:
        super().reset()
        self.pldr_state = None

    def _map_state(self, fn) -> None:
        # a state of batch size 1 (cache_first_G) is shared by every row and needs no reordering
        if self.pldr_state is not None and self.pldr_state.a.shape[0] > 1:
            self.pldr_state = self.pldr_state.map(fn)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._map_state(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._map_state(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._map_state(lambda t: t[indices, ...])


def _install_g_cache_layers(cache: Cache, num_layers: int) -> None:
    """Give a stock `DynamicCache` G-cache layers; K/V already stored are kept (their G is then recomputed once)."""
    layers = cache.layers
    for idx in range(num_layers):
        if idx < len(layers) and isinstance(layers[idx], PldrllmCacheLayer):
            continue
        if idx < len(layers) and type(layers[idx]) is not DynamicLayer:
            raise ValueError(
                f"PLDR-LLM with a learned G needs a DynamicCache (its G-cache lives in the cache layers); got "
                f"{type(layers[idx]).__name__} in layer {idx}. StaticCache and other caches need a fixed G: "
                f"call `model.collapse()` or use a `custom_G_type` model."
            )
        new_layer = PldrllmCacheLayer()
        if idx < len(layers):
            old = layers[idx]
            new_layer.__dict__.update({k: v for k, v in old.__dict__.items() if k != "pldr_state"})
            layers[idx] = new_layer
        else:
            layers.append(new_layer)


def packed_segment_ids(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sequence index of each position of a padding-free packed batch (B, S) and the most sequences in a row.

    A new sequence starts wherever the position does not advance by one (transformers' `find_packed_sequence_indices`
    rule, as `DataCollatorWithFlattening` writes them): positions [0 1 2 0 1 0] give [0 0 0 1 1 2].
    """
    segments = (torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1) != 1).cumsum(-1)
    return segments, int(segments.max()) + 1


def _present_segments(segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    # (B, K) bool: which sequence slots a row really has
    return F.one_hot(segment_ids, num_segments).amax(1).bool()


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference attention softmax(q·kᵀ·scaling + mask)·v with a float32 softmax; `query` is already q_rot·G.

    Accepts no mask, a boolean mask (True = attend) or an additive float mask. Returns (B, S, H, d) and the
    attention probabilities (B, H, S, T).
    """
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
        if attention_mask.dtype == torch.bool:
            attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
        else:
            attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


class PlgaState(NamedTuple):
    """The deductive outputs of one layer, each float32 (B, H, d, d); with K packed sequences per row, (B, K, H, d, d)
    until `PldrllmAttention` keeps the state that continues (the last sequence of each row).

    `a_p` is None where it is not stored (the released fixed-G buffer holds A, A_LM, G_LM); `dag` (N, 3) holds the
    DAG values of (A_LM, A_P, G_LM) per sequence (N = B, or the number of packed sequences), averaged over heads,
    when they were asked for. A tuple, so the G-cache and old callers can still index it (`state[3]` is G_LM).
    """

    a: torch.Tensor
    a_lm: torch.Tensor
    a_p: torch.Tensor | None
    g_lm: torch.Tensor
    dag: torch.Tensor | None = None

    def tensors(self) -> tuple[torch.Tensor | None, ...]:
        """(A, A_LM, A_P, G_LM), the order of `pldr_attentions[l]` and `DEDUCTIVE_TENSORS`."""
        return self.a, self.a_lm, self.a_p, self.g_lm

    def map(self, fn) -> "PlgaState":
        """The same state with `fn` applied to each stored tensor (the DAG values are per call, not carried)."""
        return PlgaState(*(None if t is None else fn(t) for t in self.tensors()))

    @classmethod
    def from_fixed_g(cls, buffer: torch.Tensor) -> "PlgaState":
        """The state of a fixed G from its buffer slots (A, A_LM, G_LM), each (1, H, d, d)."""
        return cls(buffer[0], buffer[1], None, buffer[2])


def gram_matrix(
    q_rot: torch.Tensor,
    gram_weights: torch.Tensor | None = None,
    segment_ids: torch.Tensor | None = None,
    num_segments: int = 1,
) -> torch.Tensor:
    """A0 = q_rotᵀ·q_rot over the positions of the call, float32: (B, H, d, d), or (B·K, H, d, d) with `segment_ids`
    (B, S) assigning the positions of a packed row to K sequences, each with its own Gram matrix. `gram_weights`
    (B, S) is 1 for the positions that enter it and 0 for padding. No 1/S (reference, spec §3.5)."""
    q = q_rot.float()
    batch, heads, _, d = q.shape
    if segment_ids is None:
        weighted = q if gram_weights is None else q * gram_weights[:, None, :, None].to(q.dtype)
        return torch.matmul(weighted.transpose(-1, -2), q)
    member = F.one_hot(segment_ids, num_segments).to(q.dtype)  # (B, S, K)
    if gram_weights is not None:
        member = member * gram_weights[..., None].to(q.dtype)
    return torch.einsum("bsk,bhsi,bhsj->bkhij", member, q, q).reshape(batch * num_segments, heads, d, d)


def residual_units(a: torch.Tensor, units) -> torch.Tensor:
    """The metric learner's residual units applied in turn to (…, d, d)."""
    for unit in units:
        a = unit(a)
    return a


def _linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x·Wᵀ + b for rows x (M, in), the bias added inside the GEMM."""
    return torch.addmm(bias, x, weight.t()) if bias is not None else x @ weight.t()


def _glu_rows(x: torch.Tensor, w1, b1, w2, b2, w3, b3, keep: bool):
    """GLU of the rows of x (M, d) → (y, (h1, h2) if `keep`): h1 = W1·x + b1, h2 = W2·x + b2 (pre-activations),
    y = W3·(silu(h1) ⊙ h2) + b3. Without `keep` the epilogue runs in place (h1 becomes the GLU's product)."""
    h1, h2 = _linear_rows(x, w1, b1), _linear_rows(x, w2, b2)
    product = F.silu(h1) * h2 if keep else F.silu(h1, inplace=True).mul_(h2)
    return _linear_rows(product, w3, b3), ((h1, h2) if keep else ())


def _unit_rows(a: torch.Tensor, unit_params, eps: float, mode: str | None):
    """One residual unit on the rows of a (M, d): LN(a + GLU_n(…GLU_1(a))). `unit_params` = (γ, β, then six tensors
    per GLU). Returns the output and what backward needs: per GLU its input (`mode` "inputs") or its input and
    pre-activations ("store"), then the LayerNorm's input, mean and 1/σ; nothing for `mode` None (no gradient)."""
    ln_w, ln_b, glus = unit_params[0], unit_params[1], unit_params[2:]
    x, saved = a, []
    for k in range(0, len(glus), 6):
        y, pre = _glu_rows(x, *glus[k : k + 6], keep=mode == "store")
        if mode is not None:
            saved += [x, *pre]
        x = y
    r = x.add_(a)
    out, mean, rstd = torch.native_layer_norm(r, (a.shape[-1],), ln_w, ln_b, eps)
    return out, (saved + [r, mean, rstd] if mode is not None else [])


def _unit_rows_backward(grad_out: torch.Tensor, unit_params, kept, grads) -> torch.Tensor:
    """Backward of `_unit_rows` for one block: the gradient of its input; parameter gradients are added into
    `grads` (None where not wanted). `kept` is what forward saved ("inputs": one tensor per GLU, "store": three)."""
    ln_w, ln_b, glus = unit_params[0], unit_params[1], unit_params[2:]
    r, mean, rstd = kept[-3:]
    num_glus = len(glus) // 6
    per_glu = (len(kept) - 3) // num_glus
    grad_r, grad_ln_w, grad_ln_b = torch.ops.aten.native_layer_norm_backward(
        grad_out, r, (r.shape[-1],), mean, rstd, ln_w, ln_b, [True, grads[0] is not None, grads[1] is not None]
    )
    for grad, part in zip(grads[:2], (grad_ln_w, grad_ln_b)):
        if grad is not None:
            grad.add_(part)
    dy = grad_r
    for j in reversed(range(num_glus)):
        w1, b1, w2, b2, w3, b3 = glus[6 * j : 6 * j + 6]
        gw1, gb1, gw2, gb2, gw3, gb3 = grads[2 + 6 * j : 8 + 6 * j]
        x, *pre = kept[per_glu * j : per_glu * (j + 1)]
        if pre:
            h1, h2 = pre
        else:  # recompute the pre-activations from the GLU's input
            h1, h2 = _linear_rows(x, w1, b1), _linear_rows(x, w2, b2)
        sig = torch.sigmoid(h1)
        s1 = h1 * sig  # silu(h1)
        if gw3 is not None:
            gw3.addmm_(dy.t(), s1 * h2)
        if gb3 is not None:
            gb3.add_(dy.sum(0))
        dg = dy @ w3
        dh2 = dg * s1
        # d silu(h)/dh = σ + s·(1 − σ)
        dh1 = dg.mul_(h2).mul_(torch.addcmul(s1, sig, 1 - s1))
        for grad_w, grad_b, dh in ((gw1, gb1, dh1), (gw2, gb2, dh2)):
            if grad_w is not None:
                grad_w.addmm_(dh.t(), x)
            if grad_b is not None:
                grad_b.add_(dh.sum(0))
        dx = dh1 @ w1
        dx.addmm_(dh2, w2)
        dy = dx
    return dy.add_(grad_r)


def _units_in_blocks(a: torch.Tensor, params, per_unit: int, block: int, eps: float, mode: str | None):
    """Every unit on each block of `block` rows of a (M, d) in turn → (output, what backward needs, block by block
    and unit by unit); `params` holds `per_unit` tensors per unit (`_fused_params`), `mode` as in `_unit_rows`."""
    units = [params[i : i + per_unit] for i in range(0, len(params), per_unit)]
    outputs, saved = [], []
    for rows in a.split(block):
        for unit in units:
            rows, kept = _unit_rows(rows, unit, eps, mode)
            saved += kept
        outputs.append(rows)
    return (outputs[0] if len(outputs) == 1 else torch.cat(outputs)), saved


class _FusedResidualUnits(torch.autograd.Function):
    """The metric learner's residual units on the rows of A (M, d) as one autograd node with a hand-written
    backward (issue 17): the same maths as the modules (`PldrllmResidualUnit`), with fewer passes over the 170-wide
    activations than autograd makes of them, which is what bounds this d = 64 GEMM on a CPU.

    - Rows run in blocks of `block` through every unit in turn, so a block's activations stay in cache.
    - Forward runs the GLU epilogue in place; backward needs silu's derivative σ·(1 + h·(1 − σ)) = σ + s·(1 − σ)
      with s = silu(h) = h·σ, so one sigmoid per activation serves s, the product and the derivative.
    - `mode` "inputs" keeps each GLU's d-wide input and recomputes its two 170-wide pre-activations in backward
      (two of the unit's six GEMMs, not all six as whole-block checkpointing would); "store" keeps them too.
    Everything backward needs goes through `save_for_backward`, so whole-layer gradient checkpointing (reentrant
    or not) frees and recomputes it like any other node's.
    """

    @staticmethod
    def forward(ctx, a, mode, block, eps, per_unit, *params):
        out, saved = _units_in_blocks(a, params, per_unit, block, eps, mode)
        ctx.block, ctx.per_unit, ctx.num_params = block, per_unit, len(params)
        ctx.save_for_backward(*params, *saved)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        tensors = ctx.saved_tensors
        params, saved = tensors[: ctx.num_params], tensors[ctx.num_params :]
        units = [params[i : i + ctx.per_unit] for i in range(0, len(params), ctx.per_unit)]
        # inputs 0–4 are a, mode, block, eps, per_unit; frozen parameters get no gradient
        wanted = ctx.needs_input_grad[5:]
        grads = [torch.zeros_like(p) if p is not None and w else None for p, w in zip(params, wanted)]
        grad_blocks = grad_out.split(ctx.block)
        kept_per_unit = len(saved) // len(grad_blocks) // len(units)
        grad_a = torch.empty_like(grad_out)
        start = 0
        for i, grad_rows in enumerate(grad_blocks):
            for u in reversed(range(len(units))):
                first = (i * len(units) + u) * kept_per_unit
                unit_grads = grads[u * ctx.per_unit : (u + 1) * ctx.per_unit]
                grad_rows = _unit_rows_backward(grad_rows, units[u], saved[first : first + kept_per_unit], unit_grads)
            grad_a[start : start + grad_rows.shape[0]] = grad_rows
            start += grad_rows.shape[0]
        return (grad_a, None, None, None, None, *grads)


def _plain_modules(units) -> bool:
    """Whether the units are the stock modules with nothing wrapped around them (no PEFT layer, forward hook or
    replaced forward, e.g. accelerate's offloading), so the fused path computes exactly what calling them would."""
    stock = (nn.ModuleList, PldrllmResidualUnit, PldrllmGLU, nn.Linear, nn.LayerNorm)
    return all(
        type(m) in stock and not (m._forward_hooks or m._forward_pre_hooks or "forward" in m.__dict__)
        for m in units.modules()
    )


def _fused_params(units) -> list[torch.Tensor | None]:
    """The units' tensors in `_FusedResidualUnits` order: per unit γ, β, then W1, b1, W2, b2, W3, b3 per GLU."""
    params = []
    for unit in units:
        params += [unit.layernormA.weight, unit.layernormA.bias]
        for glu in unit.denseAs:
            for linear in (glu.gluw1, glu.gluw2, glu.gluw3):
                params += [linear.weight, linear.bias]
    return params


def _fused_units(a: torch.Tensor, units, recompute: bool) -> torch.Tensor:
    """The residual units on the rows of A (M, d) through `_FusedResidualUnits`, float32 whatever the model dtype
    (the casts are autograd-tracked, so bf16 parameters get their gradients). `recompute`: keep only each GLU's
    d-wide input for backward."""
    a = a.float()
    params = [None if p is None else p.float() for p in _fused_params(units)]
    eps = units[0].layernormA.eps
    # the row blocks keep activations in a CPU core's cache; an accelerator wants one launch per GEMM
    block = FUSED_BLOCK_ROWS if a.device.type == "cpu" else max(a.shape[0], 1)
    per_unit = len(params) // len(units)
    if not (torch.is_grad_enabled() and (a.requires_grad or any(p is not None and p.requires_grad for p in params))):
        return _units_in_blocks(a, params, per_unit, block, eps, None)[0]
    mode = "inputs" if recompute else "store"
    return _FusedResidualUnits.apply(a, mode, block, eps, per_unit, *params)


def metric_learner(
    a0: torch.Tensor, layer_norm: nn.LayerNorm, units, *, recompute: bool = False, run_units=None, fused: bool = True
):
    """A = residual units(LN(A0)), float32, same shape as `a0` (…, d, d).

    The units act row-wise, so the matrices are independent and run in blocks that stay in the CPU cache (same
    values, bit for bit). Stock units run fused (`_FusedResidualUnits`, the default; `fused=False` calls the
    modules): `recompute=True` keeps only each GLU's d-wide input for backward and recomputes its 170-wide
    activations there. Units with something wrapped around them (PEFT, hooks) are called as modules, in blocks of
    `METRIC_LEARNER_BLOCK` matrices; `recompute=True` then keeps only each block's input and recomputes the block
    in backward (`torch.utils.checkpoint`). Either way the values and gradients are those of the plain modules.
    `run_units(block)` replaces the eager units (a compiled `residual_units`)."""
    a = _layer_norm_fp32(layer_norm, a0)
    if fused and run_units is None and _plain_modules(units):
        return _fused_units(a.reshape(-1, a.shape[-1]), units, recompute).view(a.shape)
    run = run_units if run_units is not None else functools.partial(residual_units, units=units)
    blocks = []
    for block in a.reshape(-1, *a.shape[-2:]).split(METRIC_LEARNER_BLOCK):
        blocks.append(torch.utils.checkpoint.checkpoint(run, block, use_reentrant=False) if recompute else run(block))
    return (blocks[0] if len(blocks) == 1 else torch.cat(blocks)).view(a.shape)


def power_law(a_lm: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """A_P = A_LM^∘P, entrywise (A_LM > 0), float32."""
    return torch.pow(a_lm, p.float())


def power_law_graph(a, w, b, p, alpha, beta) -> PlgaState:
    """A → A_LM = iSwiGLU(W·A + b) + ε → A_P = A_LM^∘P → G_LM = a·A_P + b_a, float32. The (H, d, d) parameters act
    from the left on (…, H, d, d), mixing rows."""
    a_lm = iswiglu(torch.matmul(w.float(), a) + b.float()) + A_LM_EPS
    a_p = power_law(a_lm, p)
    g_lm = torch.matmul(alpha.float(), a_p) + beta.float()
    return PlgaState(a, a_lm, a_p, g_lm)


def dag_terms(state: PlgaState, form: str) -> torch.Tensor:
    """DAG values of (A_LM, A_P, G_LM) per leading index, averaged over heads: (…, 3) for tensors (…, H, d, d)."""
    return torch.stack([dag_values(t, form).mean(-1) for t in (state.a_lm, state.a_p, state.g_lm)], dim=-1)


@dataclass
class PlgaCall:
    """What one forward call tells every layer's PLGA (built once in `PldrllmModel.forward`).

    `gram_weights` (B, S): 1 for the positions that enter the Gram matrix; `segment_ids` (B, S) / `num_segments`:
    the sequences packed into each row; `dag_form`: compute the DAG values in this form (None: do not);
    `cache_first_G`: the G-cache keeps only batch row 0's state.
    """

    gram_weights: torch.Tensor | None = None
    segment_ids: torch.Tensor | None = None
    num_segments: int = 1
    dag_form: str | None = None
    cache_first_G: bool = False


class PldrllmGLU(nn.Module):
    """GLU(x) = W3(silu(W1·x + b1) ⊙ (W2·x + b2)) + b3 — the feed-forward network and each metric-learner unit."""

    def __init__(self, dim: int, hidden_dim: int, bias: bool = True):
        super().__init__()
        self.gluw1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.gluw2 = nn.Linear(dim, hidden_dim, bias=bias)
        self.gluw3 = nn.Linear(hidden_dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gluw3(F.silu(self.gluw1(x)) * self.gluw2(x))

    def forward_fp32(self, x: torch.Tensor) -> torch.Tensor:
        return _linear_fp32(self.gluw3, F.silu(_linear_fp32(self.gluw1, x)) * _linear_fp32(self.gluw2, x))


class PldrllmResidualUnit(nn.Module):
    """One residual unit of the metric learner: A ← LN(A + GLU_n(…GLU_1(A))), row-wise on the d×d matrix."""

    def __init__(self, head_dim: int, a_dff: int, num_dense: int, bias: bool, eps: float):
        super().__init__()
        self.denseAs = nn.ModuleList([PldrllmGLU(head_dim, a_dff, bias) for _ in range(num_dense)])
        self.layernormA = nn.LayerNorm(head_dim, eps=eps)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        branch = a
        for glu in self.denseAs:
            branch = glu.forward_fp32(branch)
        return _layer_norm_fp32(self.layernormA, a + branch)


class PldrllmPowerLawGraphLayer(nn.Module):
    """The PLGA tensors W, b, P, a, b_a of one layer (`power_law_graph` is the maths).

    They are read only in `forward` / `power_law_of`, so a PEFT `target_parameters` adapter on them is seen by the
    attention and by the DAG terms computed from the state (`hf_integration.md` §13).
    """

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        shape = (num_heads, head_dim, head_dim)
        self.Wlst = nn.Parameter(torch.empty(shape))
        self.blst = nn.Parameter(torch.empty(shape))
        self.pwlst = nn.Parameter(torch.empty(shape))
        self.alst = nn.Parameter(torch.empty(shape))
        self.balst = nn.Parameter(torch.empty(shape))

    def forward(self, a: torch.Tensor) -> PlgaState:
        return power_law_graph(a, self.Wlst, self.blst, self.pwlst, self.alst, self.balst)

    def power_law_of(self, a_lm: torch.Tensor) -> torch.Tensor:
        """A_P of a given A_LM with this layer's P (a fixed G's buffer does not store A_P)."""
        return power_law(a_lm, self.pwlst)


class PldrllmAttention(nn.Module):
    """Power Law Graph Attention of one layer (`mha1`).

    Learned G (`deductive_outputs`): the Gram matrix of the rotated queries goes through LayerNorm (`layernorm1`),
    the residual metric learner (`reslayerAs`) and the power-law step (`plgatt_layer`); with a cache it is computed
    at prefill and reused for every decode step. Fixed G (custom_G_type or collapsed): the state comes from the model
    buffer and none of that runs. Either way the backend gets q' = q_rot·G.
    """

    def __init__(self, config: PldrllmConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        # read by the transformers attention backends
        self.is_causal = True
        self.num_key_value_groups = 1
        hidden, bias = config.hidden_size, config.attention_bias
        self.wq = nn.Linear(hidden, hidden, bias=bias)
        self.wk = nn.Linear(hidden, hidden, bias=bias)
        self.wv = nn.Linear(hidden, hidden, bias=bias)
        self.dense = nn.Linear(hidden, hidden, bias=bias)
        if config.custom_G_type is None:
            self.layernorm1 = nn.LayerNorm(self.head_dim, eps=config.layer_norm_eps)
            self.reslayerAs = nn.ModuleList(
                [
                    PldrllmResidualUnit(
                        self.head_dim, config.A_dff, config.num_denseA, config.glu_bias, config.layer_norm_eps
                    )
                    for _ in range(config.num_reslayerA)
                ]
            )
            self.plgatt_layer = PldrllmPowerLawGraphLayer(self.num_heads, self.head_dim)

    def deductive_outputs(self, q_rot: torch.Tensor, plga: PlgaCall) -> PlgaState:
        """The learned state from the rotated queries (B, H, S, d): tensors (B, H, d, d), or (B, K, H, d, d) for
        K packed sequences per row; `dag` (N, 3) with one row per sequence in (row, sequence) order."""
        batch, heads, _, d = q_rot.shape
        segments = plga.segment_ids
        a0 = gram_matrix(q_rot, plga.gram_weights, segments, plga.num_segments if segments is not None else 1)
        cfg = self.config
        recompute = cfg.metric_learner_checkpointing and self.training and torch.is_grad_enabled()
        run_units = self._compiled_units() if cfg.metric_learner_compile else None
        a = metric_learner(a0, self.layernorm1, self.reslayerAs, recompute=recompute, run_units=run_units)
        state = self.plgatt_layer(a)
        dag = dag_terms(state, plga.dag_form) if plga.dag_form is not None else None  # (B or B·K, 3)
        if segments is None:
            return state._replace(dag=dag)
        k = plga.num_segments
        state = state.map(lambda t: t.view(batch, k, heads, d, d))
        if dag is not None:
            # slots past a shorter row's last sequence dropped
            state = state._replace(dag=dag.view(batch, k, 3)[_present_segments(segments, k)])
        return state

    def _compiled_units(self):
        # built on first use and kept outside the module tree (no state-dict entries); keyed by the units it closes
        # over, so a deep copy of the model compiles its own instead of running the original's
        owner, compiled = self.__dict__.get("_compiled_residual_units", (None, None))
        if owner is not self.reslayerAs:
            compiled = torch.compile(functools.partial(residual_units, units=self.reslayerAs), dynamic=False)
            self.__dict__["_compiled_residual_units"] = (self.reslayerAs, compiled)
        return compiled

    def completed(self, state: PlgaState) -> PlgaState:
        """`state` with A_P filled in where it is not stored (fixed G): from A_LM and this layer's P when the learned
        tensors exist, else NaN (the released fixed-G format has no P)."""
        if state.a_p is not None:
            return state
        plga = getattr(self, "plgatt_layer", None)
        a_p = plga.power_law_of(state.a_lm) if plga is not None else torch.full_like(state.a_lm, float("nan"))
        return state._replace(a_p=a_p)

    def _learned_state(self, query: torch.Tensor, past_key_values, plga: PlgaCall):
        """(state, q' or None): the cached state on a decode step, else computed from this call (prefill or no
        cache; an empty KV cache means a new generation). q' is returned for packed rows, where each position
        uses its own sequence's G."""
        cache_layer = past_key_values.layers[self.layer_idx] if past_key_values is not None else None
        if cache_layer is not None and cache_layer.get_seq_length() > 0 and cache_layer.pldr_state is not None:
            return cache_layer.pldr_state, None
        state = self.deductive_outputs(query, plga)
        projected = None
        if plga.segment_ids is not None:
            segments = plga.segment_ids
            q_float = query.float()
            projected = torch.zeros_like(q_float)
            for k in range(plga.num_segments):
                member = (segments == k)[:, None, :, None].to(q_float.dtype)
                projected = projected + member * torch.matmul(q_float, state.g_lm[:, k])
            # the state that continues (cache, outputs): the last sequence of each row
            last = segments[:, -1]
            rows = torch.arange(query.shape[0], device=last.device)
            state = state.map(lambda t: t[rows, last])._replace(dag=state.dag)
        if cache_layer is not None:
            cache_layer.pldr_state = state.map(lambda t: t[:1]) if plga.cache_first_G else state._replace(dag=None)
        return state, projected

    def forward(
        self,
        hidden_states: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        fixed_g: torch.Tensor | None = None,
        plga: PlgaCall | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, PlgaState]:
        batch, seq_len, _ = hidden_states.shape
        shape = (batch, seq_len, self.num_heads, self.head_dim)
        query = self.wq(hidden_states).view(shape).transpose(1, 2)  # (B, H, S, d)
        key = self.wk(hidden_states).view(shape).transpose(1, 2)
        value = self.wv(hidden_states).view(shape).transpose(1, 2)
        apply_rope = apply_rope_interleaved if self.config.reference_rope else apply_rope_half
        query, key = apply_rope(query, *rope), apply_rope(key, *rope)

        projected = None
        if fixed_g is not None:
            state = PlgaState.from_fixed_g(fixed_g)
        else:
            state, projected = self._learned_state(query, past_key_values, plga or PlgaCall())
        if projected is None:
            projected = torch.matmul(query.float(), state.g_lm.float())  # q' = q_rot·G, (B, H, S, d)
        query = projected.to(value.dtype)

        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)

        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            dropout=self.attention_dropout if self.training else 0.0,
            **kwargs,
        )
        attn_output = self.dense(attn_output.reshape(batch, seq_len, -1))
        return attn_output, attn_weights, state


class PldrllmDecoderLayer(GradientCheckpointingLayer):
    """Post-LN decoder layer.

    ```
    h ──┬─> mha1 (PLGA) ──(+)──> layernorm1 ──┬─> ffn (GLU) ──(+)──> layernorm2 ──> out
        └──────────────────┘                  └──────────────────┘
    ```
    """

    def __init__(self, config: PldrllmConfig, layer_idx: int):
        super().__init__()
        self.mha1 = PldrllmAttention(config, layer_idx)
        self.ffn = PldrllmGLU(config.hidden_size, config.intermediate_size, config.glu_bias)
        self.layernorm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, rope, attention_mask=None, **kwargs):
        attn_output, attn_weights, state = self.mha1(hidden_states, rope, attention_mask, **kwargs)
        hidden_states = self.layernorm1(hidden_states + attn_output)
        hidden_states = self.layernorm2(hidden_states + self.ffn(hidden_states))
        # the DAG values leave the layer as a tensor of their own: reentrant gradient checkpointing keeps autograd
        # links only for the top-level tensors a layer returns, not for tensors inside a returned tuple
        return hidden_states, attn_weights, state._replace(dag=None), state.dag


class PldrllmPreTrainedModel(PreTrainedModel):
    config_class = PldrllmConfig
    config: PldrllmConfig
    base_model_prefix = "decoder"
    supports_gradient_checkpointing = True
    _no_split_modules = ["PldrllmDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values", "cache"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Initialisation of the reference v510 code (SOC repository, with its 2026-02-25 `wv` fix).

        | parameter                                        | init                                   |
        |--------------------------------------------------|----------------------------------------|
        | every Linear weight (q, k, v, o, GLUs, LM head)   | Xavier-uniform                         |
        | every Linear bias                                | 0                                      |
        | embedding                                        | N(0, 1)                                |
        | LayerNorm weight / bias                          | 1 / 0                                  |
        | PLGA W (`Wlst`), P (`pwlst`), a (`alst`)         | Xavier-normal on (H, d, d), std ≈ 0.02 |
        | PLGA b (`blst`), b_a (`balst`)                   | 0                                      |
        | fixed G buffer `past_G_values` (identity/external)| slots A_LM, G_LM = I, A = 0           |
        | fixed G buffer (random)                          | A_LM, G_LM ~ N(0, 1), A = 0            |
        """
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=1.0)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, PldrllmPowerLawGraphLayer):
            for param in (module.Wlst, module.pwlst, module.alst):
                init.xavier_normal_(param)
            init.zeros_(module.blst)
            init.zeros_(module.balst)
        elif isinstance(module, PldrllmModel) and getattr(module, "past_G_values", None) is not None:
            init.copy_(module.past_G_values, module.initial_fixed_g())
            init.copy_(module.past_G_values_status, torch.ones_like(module.past_G_values_status))


class PldrllmModel(PldrllmPreTrainedModel):
    """The PLDR-LLM decoder (no LM head); in a causal-LM checkpoint it sits under the prefix `decoder`.

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import PldrllmConfig, PldrllmModel
    >>> config = PldrllmConfig(vocab_size=99, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=37,
    ...                        num_hidden_layers=2, A_dff=8, num_reslayerA=2, max_position_embeddings=64)
    >>> out = PldrllmModel(config)(torch.tensor([[5, 6, 7]]), output_pldr_attentions=True)
    >>> out.last_hidden_state.shape, out.pldr_attentions[0][3].shape  # G_LM of layer 0: (B, H, d, d)
    (torch.Size([1, 3, 32]), torch.Size([1, 2, 16, 16]))
    ```
    """

    def __init__(self, config: PldrllmConfig):
        super().__init__(config)
        self.embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layernorm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dec_layers = nn.ModuleList([PldrllmDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        if config.has_fixed_G:
            self._register_fixed_g_buffers()
        self.gradient_checkpointing = False
        self.post_init()

    def _register_fixed_g_buffers(self) -> None:
        cfg = self.config
        shape = (cfg.num_hidden_layers, 3, 1, cfg.num_attention_heads, cfg.head_dim, cfg.head_dim)
        device = self.embedding.weight.device
        self.register_buffer("past_G_values", torch.zeros(shape, device=device), persistent=True)
        self.register_buffer(
            "past_G_values_status",
            torch.zeros(cfg.num_hidden_layers, dtype=torch.bool, device=device),
            persistent=True,
        )

    def freeze_g(self, states: list[PlgaState]) -> None:
        """Keep one G per layer and head: each layer's (A, A_LM, G_LM), each (H, d, d) or (1, H, d, d), go into the
        persistent buffer `past_G_values` (L, 3, 1, H, d, d), the released fixed-G format; attention then uses it
        instead of the metric learner (the model's `collapse()` sets `config.collapsed` with it)."""
        if len(states) != self.config.num_hidden_layers:
            raise ValueError(f"freeze_g(): {len(states)} layer states for {self.config.num_hidden_layers} layers")
        self._register_fixed_g_buffers()
        frozen = torch.stack(
            [torch.stack([s.a, s.a_lm, s.g_lm]).reshape(self.past_G_values.shape[1:]) for s in states]
        )
        self.past_G_values.copy_(frozen.to(self.past_G_values.dtype))
        self.past_G_values_status.fill_(True)

    def release_g(self) -> None:
        """Drop the frozen G (`freeze_g`); the learned weights were never changed."""
        del self.past_G_values
        del self.past_G_values_status

    def initial_fixed_g(self) -> torch.Tensor:
        """Initial value of `past_G_values` for `custom_G_type` (identity / external: G = I; random: N(0, 1))."""
        g = torch.zeros_like(self.past_G_values)
        d = self.config.head_dim
        if self.config.custom_G_type == "random":
            g[:, 1:] = torch.randn_like(g[:, 1:])
        else:
            g[:, 1:] = torch.eye(d, dtype=g.dtype, device=g.device)
        return g

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embedding = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_pldr_attentions: bool | None = None,
        cache_first_G: bool | None = None,
        output_dag_losses: bool = False,
        return_dict: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> PldrllmModelOutput | tuple:
        cfg = self.config
        past_key_values = _merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        output_attentions = output_attentions if output_attentions is not None else cfg.output_attentions
        output_hidden_states = output_hidden_states if output_hidden_states is not None else cfg.output_hidden_states
        output_pldr_attentions = (
            output_pldr_attentions if output_pldr_attentions is not None else cfg.output_pldr_attentions
        )
        cache_first_G = cache_first_G if cache_first_G is not None else cfg.cache_first_G
        use_cache = use_cache if use_cache is not None else cfg.use_cache
        return_dict = return_dict if return_dict is not None else cfg.return_dict
        if self.gradient_checkpointing and self.training:
            use_cache = False
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("PldrllmModel: pass exactly one of `input_ids` and `inputs_embeds`")

        fixed = cfg.has_fixed_G
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=cfg)
        if not use_cache:
            past_key_values = None
        if past_key_values is not None and not fixed:
            _install_g_cache_layers(past_key_values, cfg.num_hidden_layers)
        past_len = past_key_values.get_seq_length() if past_key_values is not None else 0
        compiling = torch.compiler.is_compiling()
        if not compiling:
            self._check_inputs(input_ids, inputs_embeds, attention_mask, past_len)
        if inputs_embeds is None:
            inputs_embeds = self.embedding(input_ids)
        batch, seq_len = inputs_embeds.shape[:2]

        # padding and packing (issue 13): pads stay out of the Gram matrix, positions follow the mask, and sequences
        # packed into one row (positions restarting at 0, no mask) get their own Gram matrix and attention block
        pad_aware = not cfg.reference_padding and not fixed
        if attention_mask is None and input_ids is not None and past_len == 0 and not compiling:
            attention_mask = self._mask_from_pad_ids(input_ids)
        gram_weights = segment_ids = None
        num_segments = 1
        mask_2d = attention_mask is not None and attention_mask.dim() == 2
        if not cfg.reference_padding and mask_2d and position_ids is None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -seq_len:]
        if pad_aware and mask_2d:
            gram_weights = attention_mask[:, -seq_len:]
        packed = not cfg.reference_padding and attention_mask is None and position_ids is not None and past_len == 0
        if packed and not compiling and seq_len > 1:
            segments, count = packed_segment_ids(position_ids if position_ids.dim() == 2 else position_ids[None])
            if count > 1:
                segment_ids, num_segments = segments.expand(batch, -1), count
        # a StaticCache reports its length as a tensor: the check would be a data-dependent branch under torch.compile
        if cfg.reference_rope and not compiling:
            # the longest position decides (a packed row may be longer than any of its sequences)
            longest = int(position_ids.max()) + 1 if position_ids is not None else past_len + seq_len
            if longest > cfg.max_position_embeddings:
                raise ValueError(
                    f"PLDR-LLM: sequence length {longest} (cached {past_len} + new {seq_len}) exceeds "
                    f"max_position_embeddings={cfg.max_position_embeddings}, the length of the reference RoPE table "
                    f"(reference_rope=True); truncate the input"
                )
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=inputs_embeds.device)[None] + past_len
        if position_ids.dim() == 1:
            position_ids = position_ids[None]
        position_ids = position_ids.expand(batch, -1)

        # not in place: the released code scales its input tensor in place (spec §12.8)
        hidden_states = inputs_embeds * math.sqrt(cfg.hidden_size)
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        hidden_states = self.layernorm1(hidden_states)

        causal_mask = create_causal_mask(
            config=cfg,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            # transformers builds the block-diagonal mask of packed sequences only without a cache; a packed call
            # starts from an empty cache, so its mask does not depend on it
            **{_CACHE_KWARG: None if segment_ids is not None else past_key_values},
        )
        rope = rope_cos_sin(position_ids, cfg.head_dim, cfg.rope_theta)
        plga = PlgaCall(
            gram_weights=gram_weights,
            segment_ids=segment_ids,
            num_segments=num_segments,
            dag_form=cfg.dag_loss_form if output_dag_losses and not fixed else None,
            cache_first_G=cache_first_G,
        )

        all_attentions = () if output_attentions else None
        all_pldr = () if output_pldr_attentions else None
        dag_values = []
        for layer_idx, layer in enumerate(self.dec_layers):
            hidden_states, attn_weights, state, dag = layer(
                hidden_states,
                rope,
                causal_mask,
                past_key_values=past_key_values,
                fixed_g=self.past_G_values[layer_idx] if fixed else None,
                plga=plga,
                **kwargs,
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (attn_weights,)
            if output_pldr_attentions:
                all_pldr += (layer.mha1.completed(state).tensors(),)
            if dag is not None:
                dag_values.append(dag)

        dag_losses = torch.stack(dag_values).mean(0) if dag_values else None
        output = PldrllmModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states,
            attentions=all_attentions,
            pldr_attentions=all_pldr,
            dag_losses=dag_losses,
            **{_CACHE_FIELD: past_key_values},
        )
        return output if return_dict else output.to_tuple()

    def _mask_from_pad_ids(self, input_ids: torch.Tensor) -> torch.Tensor | None:
        """The attention mask of an unmasked batch that holds `pad_token_id` (e.g. lm-evaluation-harness, which
        right-pads with id 0 and passes no mask), so that its pads stay out of the Gram matrix too.

        Only when the pad id is a token of its own (not also BOS or EOS, where a pad id can be real text) and
        `reference_padding` is off; otherwise every position counts, with transformers' usual one-time warning.
        """
        cfg = self.config
        pad = cfg.pad_token_id
        special = {cfg.bos_token_id, *(cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id])}
        if pad is None or cfg.reference_padding or pad in special:
            self.warn_if_padding_and_no_attention_mask(input_ids, None)
            return None
        pads = input_ids == pad
        if not bool(pads.any()):
            return None
        return (~pads).long()

    def _check_inputs(self, input_ids, inputs_embeds, attention_mask, past_len: int) -> None:
        """Clear errors for inputs that would otherwise fail deep inside (or not at all). Token ids are checked
        only on calls that start from an empty cache: decode steps feed back the model's own predictions, and a
        check there would cost a device sync per generated token."""
        cfg = self.config
        shape = tuple((input_ids if input_ids is not None else inputs_embeds).shape)
        if len(shape) < 2 or shape[1] == 0 or shape[0] == 0:
            raise ValueError(
                f"PldrllmModel: empty input of shape {shape}; pass at least one token per row, as (batch, length)"
            )
        if input_ids is not None and past_len == 0:
            low, high = (int(v) for v in torch.aminmax(input_ids))  # one pass, one device sync
            if low < 0 or high >= cfg.vocab_size:
                bad = high if high >= cfg.vocab_size else low
                raise ValueError(
                    f"PldrllmModel: token id {bad} in `input_ids` is outside the vocabulary [0, {cfg.vocab_size}); "
                    f"was the input made by another model's tokenizer?"
                )
        if attention_mask is not None and attention_mask.dim() == 2:
            expected = (shape[0], past_len + shape[1])
            if tuple(attention_mask.shape) != expected:
                raise ValueError(
                    f"PldrllmModel: `attention_mask` of shape {tuple(attention_mask.shape)}, expected {expected} "
                    f"(batch, cached {past_len} + new {shape[1]} tokens)"
                )


DEDUCTIVE_TENSORS = ("A", "A_LM", "A_P", "G_LM")


# room that the default calibration inputs leave for the 16-token greedy continuation of `plldr_hf.diagnostics`
CALIBRATION_ROOM = 16


def default_calibration(config: PldrllmConfig) -> list[list[int]]:
    """The calibration inputs of `collapse()`, `plldr_hf.diagnostics.diagnose` and the training report: the empty
    prompt `[eos]` of the v510Gi recipe (the value frozen, as the reference of the measurement) plus seeded random
    sequences of 8–96 tokens that leave `CALIBRATION_ROOM` positions for a continuation."""
    generator = torch.Generator().manual_seed(0)
    low = min(6, config.vocab_size - 1)
    longest = max(1, config.max_position_embeddings - CALIBRATION_ROOM)
    sequences = [[config.eos_token_id if config.eos_token_id is not None else low]]
    for n in (8, 16, 24, 32, 48, 64, 96):
        if n <= longest:
            sequences.append(torch.randint(low, config.vocab_size, (n,), generator=generator).tolist())
    return sequences


def calibration_ids(config: PldrllmConfig, calibration, tokenizer=None, owner: str = "collapse()") -> list[list[int]]:
    """The calibration inputs of `collapse()` and `plldr_hf.diagnostics.diagnose` as lists of ids (empty ones
    dropped): None → `default_calibration(config)`; texts (with `tokenizer`, no special tokens); a 2D id tensor, one
    sequence per row; or lists of ids."""
    if calibration is None:
        sequences = default_calibration(config)
    elif isinstance(calibration, str) or (
        isinstance(calibration, (list, tuple)) and calibration and isinstance(calibration[0], str)
    ):
        if tokenizer is None:
            raise ValueError(f"{owner}: calibration texts need a `tokenizer`")
        texts = [calibration] if isinstance(calibration, str) else list(calibration)
        sequences = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    elif isinstance(calibration, torch.Tensor):
        if calibration.dim() != 2:
            raise ValueError(f"{owner}: calibration ids must be 2D (N, S), got shape {tuple(calibration.shape)}")
        sequences = calibration.tolist()
    else:
        sequences = [list(ids) for ids in calibration]
    return [list(seq) for seq in sequences if len(seq) > 0]


def order_parameter_soc(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """SOC-paper order parameter RMSE(x − x_ref) / |mean(x_ref)|, pooled over every value given (float64).

    0 for an input-invariant tensor; published values run from 0 (SOC-110M-5) to ~10² (sub-critical models).
    """
    rmse = (samples.double() - reference.double()).pow(2).mean().sqrt()
    if rmse == 0:
        return 0.0
    return (rmse / reference.double().mean().abs()).item()


def order_parameter_rms(x1: torch.Tensor, x2: torch.Tensor) -> float:
    """Audit order parameter RMS(x1 − x2) / ½(RMS(x1) + RMS(x2)) (float64); bounded by 2, not comparable with
    the SOC definition."""
    diff = (x1.double() - x2.double()).pow(2).mean().sqrt()
    if diff == 0:
        return 0.0
    scale = 0.5 * (x1.double().pow(2).mean().sqrt() + x2.double().pow(2).mean().sqrt())
    return (diff / scale).item()


@dataclass
class PldrllmCollapseReport:
    """What `collapse()` measured on its calibration inputs (each input run alone, unpadded, no cache).

    `order_parameter[name]`: SOC definition, each input's tensor vs the first input's (the frozen value), pooled
    over the model.
    `order_parameter_rms[name]`: audit definition, max over input pairs and layers. `per_layer*`: the same per
    layer. `max_abs_logit_diff` / `argmax_agreement`: collapsed vs uncollapsed logits on the calibration inputs
    (None when the model was not collapsed).
    """

    num_calibration: int
    tolerance: float
    forced: bool
    order_parameter: dict
    order_parameter_rms: dict
    per_layer: dict
    per_layer_rms: dict
    max_abs_logit_diff: float | None = None
    argmax_agreement: float | None = None

    @property
    def invariant(self) -> bool:
        """True when G_LM varies less than the tolerance (SOC definition)."""
        return self.order_parameter["G_LM"] <= self.tolerance

    def to_dict(self) -> dict:
        return {**asdict(self), "invariant": self.invariant}

    def __str__(self) -> str:
        lines = [
            f"collapse report: {self.num_calibration} calibration inputs, tolerance {self.tolerance:g} on G_LM "
            f"(SOC order parameter), invariant: {self.invariant}" + (" (forced)" if self.forced else ""),
            "",
            "| tensor | order parameter (SOC: RMSE / abs(mean), across inputs) | symmetric RMS (max) "
            "| per layer (SOC) |",
            "|---|---|---|---|",
        ]
        for name in DEDUCTIVE_TENSORS:
            per_layer = ", ".join(f"{v:.3g}" for v in self.per_layer[name])
            lines.append(
                f"| {name} | {self.order_parameter[name]:.3g} | {self.order_parameter_rms[name]:.3g} | {per_layer} |"
            )
        if self.max_abs_logit_diff is not None:
            lines += [
                "",
                f"collapsed vs uncollapsed logits: max |Δlogit| {self.max_abs_logit_diff:.3g}, "
                f"argmax agreement {100 * self.argmax_agreement:.2f}%",
            ]
        return "\n".join(lines)


class PldrllmForCausalLM(PldrllmPreTrainedModel, GenerationMixin):
    """PLDR-LLM with its untied LM head `final_layer` (with bias).

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import PldrllmConfig, PldrllmForCausalLM
    >>> config = PldrllmConfig(vocab_size=99, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=37,
    ...                        num_hidden_layers=2, A_dff=8, num_reslayerA=2, max_position_embeddings=64)
    >>> model = PldrllmForCausalLM(config).eval()
    >>> model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False).shape
    torch.Size([1, 7])
    ```
    """

    def __init__(self, config: PldrllmConfig):
        super().__init__(config)
        self.decoder = PldrllmModel(config)
        self.final_layer = nn.Linear(config.hidden_size, config.vocab_size, bias=config.final_bias)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embedding = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.final_layer

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.final_layer = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_pldr_attentions: bool | None = None,
        cache_first_G: bool | None = None,
        output_dag_losses: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        cache: Cache | None = None,
        **kwargs,
    ) -> PldrllmCausalLMOutput | tuple:
        cfg = self.config
        return_dict = return_dict if return_dict is not None else cfg.return_dict
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        # labels already shifted by the caller (sequence / context parallelism splits the sequence before shifting)
        shift_labels = kwargs.pop("shift_labels", None)
        has_labels = labels is not None or shift_labels is not None
        weights = cfg.dag_weights
        use_dag = has_labels and any(w > 0 for w in weights) and not cfg.has_fixed_G
        if output_dag_losses is None:
            output_dag_losses = use_dag
        outputs = self.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=_merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward"),
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            output_pldr_attentions=output_pldr_attentions,
            cache_first_G=cache_first_G,
            output_dag_losses=output_dag_losses or use_dag,
            return_dict=True,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.final_layer(hidden_states[:, slice_indices, :])

        loss = lm_loss = None
        if has_labels:
            lm_loss = self.loss_function(
                logits=logits,
                labels=labels,
                vocab_size=cfg.vocab_size,
                num_items_in_batch=num_items_in_batch,
                shift_labels=shift_labels,
            )
            loss = lm_loss
            if use_dag and outputs.dag_losses is not None:
                per_sequence = outputs.dag_losses @ outputs.dag_losses.new_tensor(weights)  # (N,) sequences
                if num_items_in_batch is None:
                    dag_term = per_sequence.mean()
                else:
                    # Trainer sums micro-batch losses (gradient accumulation) and scales by the world size (DDP);
                    # weighting each sequence by its share of the batch's label tokens, like the CE, keeps the DAG
                    # gradient independent of how the batch is split (hf_integration.md §10.2)
                    if shift_labels is not None:
                        targets = shift_labels
                    else:
                        targets = F.pad(labels[..., 1:], (0, 1), value=-100)
                    counted = targets != -100  # (B, S): position s predicts a label token
                    if per_sequence.shape[0] != counted.shape[0]:
                        # a packed batch: count each packed sequence's label tokens
                        segments, count = packed_segment_ids(position_ids.expand(counted.shape[0], -1))
                        member = F.one_hot(segments, count) * counted[..., None]  # (B, S, K)
                        tokens = member.sum(1)[_present_segments(segments, count)]
                    else:
                        tokens = counted.sum(-1)
                    dag_term = (per_sequence * tokens.to(per_sequence.dtype)).sum() / num_items_in_batch
                loss = lm_loss + dag_term.to(lm_loss.dtype)

        output = PldrllmCausalLMOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            pldr_attentions=outputs.pldr_attentions,
            lm_loss=lm_loss if use_dag else None,
            dag_losses=outputs.dag_losses.mean(0) if output_dag_losses and outputs.dag_losses is not None else None,
            **{_CACHE_FIELD: outputs[_CACHE_FIELD] if _CACHE_FIELD in outputs else None},
        )
        return output if return_dict else output.to_tuple()

    @torch.no_grad()
    def collapse(
        self,
        calibration=None,
        tolerance: float = 1e-3,
        force: bool = False,
        tokenizer=None,
    ) -> PldrllmCollapseReport:
        """Freeze one constant G per layer and head after measuring that G is input-invariant (spec §9.5).

        Runs the model on calibration inputs (None: a built-in set of seeded random sequences plus the empty prompt
        `[eos]` of the v510Gi recipe; a 2D id tensor or lists of ids, one sequence per row; or texts with
        `tokenizer`), measures how much A, A_LM, A_P and G_LM vary across them, and refuses with the numbers when
        G_LM's SOC order parameter exceeds `tolerance`, unless `force=True`. Then A, A_LM, G_LM of the first input
        (the reference of the measurement) go into the persistent buffer `decoder.past_G_values`, `config.collapsed`
        is set, and attention runs as SDPA with q' = q_rot·G: no Gram matrix, metric learner or power-law step.
        Merge LoRA adapters first.
        """
        cfg = self.config
        if cfg.custom_G_type is not None:
            raise ValueError(f"collapse(): this model already has a fixed G (custom_G_type={cfg.custom_G_type!r})")
        if cfg.collapsed:
            raise ValueError("collapse(): the model is already collapsed; call uncollapse() first")
        if any(hasattr(module, "base_layer") for module in self.modules()):
            raise ValueError("collapse(): the model carries PEFT adapters; call merge_and_unload() before collapse()")
        sequences = self._calibration_sequences(calibration, tokenizer)
        was_training = self.training
        self.eval()
        try:
            per_input, reference_logits = [], []
            for ids in sequences:
                out = self(ids, use_cache=False, output_pldr_attentions=True)
                # (L, H, d, d) per tensor type for this input
                per_input.append([torch.stack([layer[i][0] for layer in out.pldr_attentions]) for i in range(4)])
                reference_logits.append(out.logits)
            report = self._measure_invariance(per_input, tolerance, force)
            if not report.invariant and not force:
                raise ValueError(
                    f"collapse() refused: G_LM is not input-invariant on {len(sequences)} calibration inputs; "
                    f"order parameter (SOC: RMSE/|mean| across inputs): "
                    + ", ".join(f"{k} {v:.3g}" for k, v in report.order_parameter.items())
                    + "; symmetric RMS: "
                    + ", ".join(f"{k} {v:.3g}" for k, v in report.order_parameter_rms.items())
                    + f". Tolerance on G_LM: {tolerance:g}. Pass force=True to collapse anyway (an approximation)."
                )
            # the first input's state per layer, (H, d, d) each
            reference = per_input[0]
            self.decoder.freeze_g(
                [PlgaState(*(reference[i][layer] for i in range(4))) for layer in range(cfg.num_hidden_layers)]
            )
            cfg.collapsed = True
            max_diff, agree, total = 0.0, 0, 0
            for ids, ref in zip(sequences, reference_logits):
                logits = self(ids, use_cache=False).logits
                max_diff = max(max_diff, (logits.float() - ref.float()).abs().max().item())
                agree += (logits.argmax(-1) == ref.argmax(-1)).sum().item()
                total += ids.numel()
            report.max_abs_logit_diff, report.argmax_agreement = max_diff, agree / total
        finally:
            self.train(was_training)
        return report

    def uncollapse(self) -> "PldrllmForCausalLM":
        """Drop the frozen G and run the metric learner again (the learned weights were never changed)."""
        if not self.config.collapsed:
            raise ValueError("uncollapse(): the model is not collapsed")
        self.decoder.release_g()
        self.config.collapsed = False
        return self

    def to_fixed_g(self) -> "PldrllmForCausalLM":
        """A collapsed model in the released fixed-G format (`custom_G_type="external"`, G in `past_G_values`),
        without the metric learner and PLGA tensors: smaller, and loadable by the existing PLDR-LLM tooling.
        One way: keep the uncollapsed checkpoint for further training."""
        if not self.config.collapsed:
            raise ValueError("to_fixed_g(): collapse() the model first")
        config = copy.deepcopy(self.config)
        config.collapsed = False
        config.custom_G_type = "external"
        with torch.device("meta"):
            fixed = type(self)(config)
        state = self.state_dict()
        fixed.load_state_dict({k: state[k] for k in fixed.state_dict()}, strict=True, assign=True)
        fixed.generation_config = copy.deepcopy(self.generation_config)
        return fixed.train(self.training)

    def _calibration_sequences(self, calibration, tokenizer) -> list[torch.Tensor]:
        cfg = self.config
        device = self.decoder.embedding.weight.device
        sequences = calibration_ids(cfg, calibration, tokenizer, "collapse()")
        if len(sequences) < 2:
            raise ValueError(f"collapse(): need at least 2 non-empty calibration inputs, got {len(sequences)}")
        too_long = [len(seq) for seq in sequences if len(seq) > cfg.max_position_embeddings]
        if too_long:
            raise ValueError(
                f"collapse(): calibration inputs of length {too_long} exceed max_position_embeddings="
                f"{cfg.max_position_embeddings}"
            )
        return [torch.tensor([seq], dtype=torch.long, device=device) for seq in sequences]

    @staticmethod
    def _measure_invariance(per_input: list, tolerance: float, force: bool) -> PldrllmCollapseReport:
        order, order_rms, per_layer, per_layer_rms = {}, {}, {}, {}
        for i, name in enumerate(DEDUCTIVE_TENSORS):
            samples = torch.stack([sample[i] for sample in per_input])  # (N, L, H, d, d)
            # the first input is the reference and the value frozen (the empty prompt [eos] by default, as in the
            # v510Gi recipe), so an invariant model collapses bit-exactly
            reference = samples[:1]
            num_layers = samples.shape[1]
            order[name] = order_parameter_soc(samples, reference)
            per_layer[name] = [
                order_parameter_soc(samples[:, layer], reference[:, layer]) for layer in range(num_layers)
            ]
            pairs = [(a, b) for a in range(len(per_input)) for b in range(a + 1, len(per_input))]
            per_layer_rms[name] = [
                max(order_parameter_rms(samples[a, layer], samples[b, layer]) for a, b in pairs)
                for layer in range(num_layers)
            ]
            order_rms[name] = max(per_layer_rms[name])
        return PldrllmCollapseReport(
            num_calibration=len(per_input),
            tolerance=tolerance,
            forced=force,
            order_parameter=order,
            order_parameter_rms=order_rms,
            per_layer=per_layer,
            per_layer_rms=per_layer_rms,
        )


@dataclass
class PldrllmSequenceClassifierOutput(SequenceClassifierOutputWithPast):
    """`SequenceClassifierOutputWithPast` plus `pldr_attentions` (see `PldrllmModelOutput`)."""

    pldr_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None


@dataclass
class PldrllmTokenClassifierOutput(TokenClassifierOutput):
    """`TokenClassifierOutput` plus `pldr_attentions` (see `PldrllmModelOutput`)."""

    pldr_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None


@dataclass
class PldrllmQuestionAnsweringOutput(QuestionAnsweringModelOutput):
    """`QuestionAnsweringModelOutput` plus `pldr_attentions` (see `PldrllmModelOutput`)."""

    pldr_attentions: tuple[tuple[torch.FloatTensor, ...], ...] | None = None


class _PldrllmHeadModel(PldrllmPreTrainedModel):
    """Shared body of the released task heads: the decoder under `decoder`, run without a cache."""

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embedding = value

    def _run_decoder(self, input_ids, attention_mask, position_ids, inputs_embeds, kwargs) -> PldrllmModelOutput:
        kwargs.pop("use_cache", None)
        kwargs.pop("past_key_values", None)
        kwargs.pop("cache", None)
        return self.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=False,
            return_dict=True,
            **kwargs,
        )


class PldrllmForSequenceClassification(_PldrllmHeadModel):
    """PLDR-LLM with the released sequence-classification head `score` (no bias) on the last non-pad token.

    The pooled position is the last position the `attention_mask` keeps (left or right padding alike); without a
    mask, the last token that is not `pad_token_id`, as in the released code.
    """

    def __init__(self, config: PldrllmConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.decoder = PldrllmModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> PldrllmSequenceClassifierOutput | tuple:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self._run_decoder(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        logits = self.score(outputs.last_hidden_state)  # (B, S, num_labels)
        batch, seq_len = logits.shape[:2]
        positions = torch.arange(seq_len, device=logits.device)
        if attention_mask is not None:
            keep = attention_mask.to(logits.device).bool()
        elif input_ids is not None and self.config.pad_token_id is not None:
            keep = input_ids.to(logits.device) != self.config.pad_token_id
        else:
            keep = torch.ones(batch, seq_len, dtype=torch.bool, device=logits.device)
        last = (positions * keep).argmax(-1)  # (B,)
        pooled_logits = logits[torch.arange(batch, device=logits.device), last]
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, pooled_logits=pooled_logits, config=self.config)
        output = PldrllmSequenceClassifierOutput(
            loss=loss,
            logits=pooled_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            pldr_attentions=outputs.pldr_attentions,
        )
        return output if return_dict else output.to_tuple()


class PldrllmForTokenClassification(_PldrllmHeadModel):
    """PLDR-LLM with the released token-classification head: dropout (`classifier_dropout`, default 0.1) + `score`
    with bias."""

    def __init__(self, config: PldrllmConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.decoder = PldrllmModel(config)
        dropout = getattr(config, "classifier_dropout", None)
        self.dropout = nn.Dropout(0.1 if dropout is None else dropout)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=True)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> PldrllmTokenClassifierOutput | tuple:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self._run_decoder(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        logits = self.score(self.dropout(outputs.last_hidden_state))
        loss = None if labels is None else self.loss_function(logits, labels, self.config)
        output = PldrllmTokenClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            pldr_attentions=outputs.pldr_attentions,
        )
        return output if return_dict else output.to_tuple()


class PldrllmForQuestionAnswering(_PldrllmHeadModel):
    """PLDR-LLM with the released extractive question-answering head `qa_outputs` (2 logits per token, bias)."""

    def __init__(self, config: PldrllmConfig):
        super().__init__(config)
        self.decoder = PldrllmModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2, bias=True)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> PldrllmQuestionAnsweringOutput | tuple:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        kwargs.pop("token_type_ids", None)
        outputs = self._run_decoder(input_ids, attention_mask, position_ids, inputs_embeds, kwargs)
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).split(1, dim=-1)
        start_logits, end_logits = start_logits.squeeze(-1).contiguous(), end_logits.squeeze(-1).contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        output = PldrllmQuestionAnsweringOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            pldr_attentions=outputs.pldr_attentions,
        )
        return output if return_dict else output.to_tuple()


__all__ = [
    "PldrllmPreTrainedModel",
    "PldrllmModel",
    "PldrllmForCausalLM",
    "PldrllmForSequenceClassification",
    "PldrllmForTokenClassification",
    "PldrllmForQuestionAnswering",
    "PldrllmCacheLayer",
    "PldrllmCollapseReport",
    "dag_loss",
    "dag_values",
    "order_parameter_soc",
    "default_calibration",
    "order_parameter_rms",
]
