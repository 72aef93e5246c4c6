r"""The DAG regulariser of PLDR-LLM: the NOTEARS acyclicity value of a d×d matrix and its overflow-safe evaluation.

NOTEARS (Zheng et al., arXiv 1803.01422, §3, Theorem 1) measures how far a weighted adjacency matrix M is from a DAG with
h(M) = tr(exp(M∘M)) − d, 0 exactly for an acyclic M. The PLDR-LLM reference code (arXiv 2410.16703) uses the
log-ratio form |ln(tr(exp(M∘M)) / d)| on the deductive outputs A_LM, A_P and G_LM of every layer and head.

| symbol          | meaning                                   | code                       |
|-----------------|-------------------------------------------|----------------------------|
| X = M∘M         | entrywise square, ≥ 0                     | `m.float().square()`       |
| ln(tr(e^X) / d) | log mean trace of the matrix exponential  | `log_mean_trace_exp(x)`    |
| h(M)            | NOTEARS value                             | `dag_values(m, "notears")` |
| \|ln(tr/d)\|    | reference log-ratio value                 | `dag_values(m)`            |

This file is remote code (copied next to the weights by `save_pretrained`): it imports only torch.
"""

import math

import torch


class LogMeanTraceExp(torch.autograd.Function):
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
        if not math.isfinite(norm):
            # a matrix with an infinite or NaN entry has no DAG value: NaN, as any loss computed from it
            nan = torch.full(x.shape[:-2], math.nan, dtype=x.dtype, device=x.device)
            ctx.save_for_backward(torch.full_like(x, math.nan), torch.ones_like(nan))
            return nan
        squarings = max(0, math.ceil(math.log2(2 * norm))) if norm > 0.5 else 0
        # an exact power-of-two scale as a float: entries near the float32 limit need 2^128 and more, which a
        # Python integer divisor cannot be converted to
        z = x * 0.5**squarings
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        # Horner for e^z − I = z(I + z/2(I + z/3(… (I + z/8))))
        w = eye + z / LogMeanTraceExp.TAYLOR_DEGREE
        for k in range(LogMeanTraceExp.TAYLOR_DEGREE - 1, 1, -1):
            w = eye + (z @ w) / k
        w = z @ w
        if norm <= LogMeanTraceExp.DIRECT_LIMIT:
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


def log_mean_trace_exp(x: torch.Tensor) -> torch.Tensor:
    """ln(tr(e^X) / d) of each d×d matrix X ≥ 0 in `x` (..., d, d), with the closed-form gradient of
    `LogMeanTraceExp`."""
    return LogMeanTraceExp.apply(x)


def dag_values(m: torch.Tensor, form: str = "log_ratio") -> torch.Tensor:
    """DAG value of each d×d matrix in `m` (..., d, d) → (...), float32.

    `"notears"`: h(M) = tr(exp(M∘M)) − d. `"log_ratio"` (the reference code): |ln(tr(exp(M∘M)) / d)|. Both go
    through the overflow-safe, accurate ln(tr e^X / d) of `log_mean_trace_exp`; log-ratio values of order 10³ (seen
    in trained checkpoints) are finite, while the NOTEARS value e^1000 is not representable and comes out inf.
    """
    d = m.shape[-1]
    log_ratio = log_mean_trace_exp(m.float().square())
    if form == "log_ratio":
        return log_ratio.abs()
    if form == "notears":
        return d * torch.expm1(log_ratio)
    raise ValueError(f"unknown DAG loss form {form!r}; expected 'log_ratio' or 'notears'")


def dag_loss(m: torch.Tensor, form: str = "log_ratio") -> torch.Tensor:
    """`dag_values` averaged over every leading axis (batch items, heads, ...)."""
    return dag_values(m, form).mean()
