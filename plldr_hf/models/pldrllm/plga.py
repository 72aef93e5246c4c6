"""Power Law Graph Attention (PLGA) maths of PLDR-LLM as pure functions, with the metric learner's modules as the
reference path (arXiv 2410.16703; the G-cache of arXiv 2502.13502).

Per layer and head, from the rotated queries q_rot (B, H, S, d):

    A0   = q_rotᵀ·q_rot                      (Gram matrix over the call's positions, no mask, no 1/S)
    A    = R_n(…R_1(LN(A0)))                  (metric learner: residual units R = LN(x + GLU_m(…GLU_1(x))))
    A_LM = iSwiGLU(W·A + b) + ε               (entrywise positive)
    A_P  = A_LM^∘P                            (entrywise power)
    G_LM = a·A_P + b_a                        (bilinear form of the scores (q_rot·G_LM)·k_rotᵀ/√d)

| symbol | meaning                          | code                                              |
|--------|----------------------------------|---------------------------------------------------|
| A0     | Gram matrix of the queries       | `gram_matrix`                                     |
| A      | metric tensor                    | `metric_learner_modules` (fused: `fused_units.py`) |
| W, b   | A_LM = iSwiGLU(W·A + b) + ε      | `PldrllmPowerLawGraphLayer.Wlst`, `.blst`         |
| P      | power-law exponents              | `.pwlst`, `power_law`                             |
| a, b_a | G_LM = a·A_P + b_a               | `.alst`, `.balst`, `power_law_graph`              |
| state  | (A, A_LM, A_P, G_LM, DAG values) | `PlgaState`                                       |

The module path here is the reference every optimised path is tested against (`fused_units.py` computes the same
values and gradients). This file is remote code (copied next to the weights by `save_pretrained`): it imports only
torch and its sibling `dag.py`.
"""

import contextlib
import functools
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from .dag import dag_values


# ε added to A_LM so that it is entrywise positive and the power step A_LM^P is defined (reference, hard-coded)
A_LM_EPS = 1e-9
# d×d matrices per block of the metric learner on the module path (`metric_learner_modules`): 32 matrices × 64 rows keep a
# GLU's 170-wide activations (1.4 MB) near the core; unblocked, the 110M scoring forward (batch 16 × 32, no cache)
# is 1.8× slower on a 2-core CPU (`python -m benchmarks run --only scoring`, `benchmarks/results.md`)
METRIC_LEARNER_BLOCK = 32


def linear_fp32(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)` computed in float32 whatever the layer's dtype."""
    # call the module itself when it already is float32, so PEFT wrappers on it stay active
    if layer.weight.dtype == torch.float32:
        return layer(x)
    bias = None if layer.bias is None else layer.bias.float()
    return F.linear(x, layer.weight.float(), bias)


def layer_norm_fp32(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """`norm(x)` computed in float32 whatever the norm's dtype."""
    if norm.weight.dtype == torch.float32:
        return norm(x)
    return F.layer_norm(x, norm.normalized_shape, norm.weight.float(), norm.bias.float(), norm.eps)


def float32_region(device_type: str):
    """A context in which autocast (bf16 / fp16 mixed precision) is off, so the PLGA maths stay float32: the Gram
    matrix, the metric learner (whose fused backward assumes one dtype), the power law and the DAG's matrix
    exponential. Outside autocast it is a no-op."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def iswiglu(x: torch.Tensor) -> torch.Tensor:
    """iSwiGLU(x) = x·silu(x) = x²·σ(x) ≥ 0: SwiGLU with identity weights and no bias."""
    return x * F.silu(x)


def packed_segment_ids(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sequence index of each position of a padding-free packed batch (B, S) and the most sequences in a row.

    A new sequence starts wherever the position does not advance by one (transformers' `find_packed_sequence_indices`
    rule, as `DataCollatorWithFlattening` writes them): positions [0 1 2 0 1 0] give [0 0 0 1 1 2].
    """
    segments = (torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1) != 1).cumsum(-1)
    return segments, int(segments.max()) + 1


def present_segments(segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """(B, K) bool: which of the K sequence slots each packed row really has."""
    return F.one_hot(segment_ids, num_segments).amax(1).bool()


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
    (B, S) is 1 for the positions that enter it and 0 for padding. No 1/S, as in the reference code."""
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


def metric_learner_modules(a: torch.Tensor, units, *, recompute: bool = False, run_units=None) -> torch.Tensor:
    """The residual units called as modules on LN(A0) = `a` (…, d, d), in blocks of `METRIC_LEARNER_BLOCK` matrices
    (the units act row-wise, so the blocks are independent; same values, bit for bit). `recompute=True` keeps only
    each block's input and recomputes the block in backward (`torch.utils.checkpoint`); `run_units(block)` replaces
    the eager units (a compiled `residual_units`)."""
    run = run_units if run_units is not None else functools.partial(residual_units, units=units)
    blocks, matrices = [], a.reshape(-1, *a.shape[-2:])
    # a traced graph takes one block: a loop over blocks would specialise it to the batch size
    for block in [matrices] if torch.compiler.is_compiling() else matrices.split(METRIC_LEARNER_BLOCK):
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

    def __init__(self, dim: int, hidden_dim: int, bias: bool = True, dtype: torch.dtype | None = None):
        super().__init__()
        self.gluw1 = nn.Linear(dim, hidden_dim, bias=bias, dtype=dtype)
        self.gluw2 = nn.Linear(dim, hidden_dim, bias=bias, dtype=dtype)
        self.gluw3 = nn.Linear(hidden_dim, dim, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gluw3(F.silu(self.gluw1(x)) * self.gluw2(x))

    def forward_fp32(self, x: torch.Tensor) -> torch.Tensor:
        return linear_fp32(self.gluw3, F.silu(linear_fp32(self.gluw1, x)) * linear_fp32(self.gluw2, x))


class PldrllmResidualUnit(nn.Module):
    """One residual unit of the metric learner: A ← LN(A + GLU_n(…GLU_1(A))), row-wise on the d×d matrix."""

    def __init__(self, head_dim: int, a_dff: int, num_dense: int, bias: bool, eps: float):
        super().__init__()
        # float32 whatever the default dtype (a float16 or bfloat16 `from_config`), as `_keep_in_fp32_modules_strict`
        # keeps them in loads
        self.denseAs = nn.ModuleList(
            [PldrllmGLU(head_dim, a_dff, bias, dtype=torch.float32) for _ in range(num_dense)]
        )
        self.layernormA = nn.LayerNorm(head_dim, eps=eps, dtype=torch.float32)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        branch = a
        for glu in self.denseAs:
            branch = glu.forward_fp32(branch)
        return layer_norm_fp32(self.layernormA, a + branch)


class PldrllmPowerLawGraphLayer(nn.Module):
    """The PLGA tensors W, b, P, a, b_a of one layer (`power_law_graph` is the maths).

    They are read only in `forward` / `power_law_of`, so a PEFT `target_parameters` adapter on them is seen by the
    attention and by the DAG terms computed from the state (PEFT's `target_parameters` wraps a parameter only
    inside the forward of the module that owns it).
    """

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        shape = (num_heads, head_dim, head_dim)
        # float32 whatever the default dtype, as the metric learner's units
        self.Wlst = nn.Parameter(torch.empty(shape, dtype=torch.float32))
        self.blst = nn.Parameter(torch.empty(shape, dtype=torch.float32))
        self.pwlst = nn.Parameter(torch.empty(shape, dtype=torch.float32))
        self.alst = nn.Parameter(torch.empty(shape, dtype=torch.float32))
        self.balst = nn.Parameter(torch.empty(shape, dtype=torch.float32))

    def forward(self, a: torch.Tensor, heads: slice = slice(None)) -> PlgaState:
        """The state of the metric tensors `a` (…, h, d, d) of the heads `heads` (all, or a tensor-parallel rank's)."""
        return power_law_graph(
            a, self.Wlst[heads], self.blst[heads], self.pwlst[heads], self.alst[heads], self.balst[heads]
        )

    def power_law_of(self, a_lm: torch.Tensor, heads: slice = slice(None)) -> torch.Tensor:
        """A_P of a given A_LM with this layer's P (a fixed G's buffer does not store A_P)."""
        return power_law(a_lm, self.pwlst[heads])
