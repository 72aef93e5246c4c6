"""The metric learner's residual units fused into one autograd node with a hand-written backward, for CPUs.

Same maths as the modules of `plga.py` (`PldrllmResidualUnit`: A ← LN(A + GLU_m(…GLU_1(A))), row-wise on each d×d
matrix), with fewer passes over the GLUs' a-wide activations than autograd makes of them; at the released shape
(d = 64, A_dff = 170) those passes, not the GEMMs' FLOPs, bound the metric learner on a CPU. Measurements:
`benchmarks/results.md` and `benchmarks/results/metric_learner.md`.

| symbol          | meaning                                         | code                                  |
|-----------------|-------------------------------------------------|---------------------------------------|
| h1, h2          | a GLU's pre-activations W1·x + b1, W2·x + b2    | `_glu_rows`                           |
| s = silu(h1)    | h1·σ(h1); silu' = σ + s·(1 − σ)                 | `_unit_rows_backward`                 |
| rows            | the d-wide rows of every A of a call, (M, d)    | `fused_units(a, …)`                   |

`fused_units` is the entry point; `is_plain(units)` says when it computes exactly what calling the modules would
(no PEFT layer, hook or replaced forward). This file is remote code (copied next to the weights by
`save_pretrained`): it imports only torch and its sibling `plga.py`.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .plga import PldrllmGLU, PldrllmResidualUnit


# rows per block of the fused path (`FusedResidualUnits`) on a CPU: a block's d-wide input and two 170-wide GLU
# activations (1024 × (64 + 2·170) floats ≈ 1.6 MB) stay near the core between the GEMMs and their elementwise
# epilogues, and a block is large enough that Python's per-op overhead stays small (256, 512, 1024 and 2048 rows
# measured at the 110M training and scoring shapes with `python -m benchmarks run`; 1024 was best or level with
# the best for both)
FUSED_BLOCK_ROWS = 1024


def _linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x·Wᵀ + b for rows x (M, in), the bias added inside the GEMM."""
    return torch.addmm(bias, x, weight.t()) if bias is not None else x @ weight.t()


def _glu_rows(x: torch.Tensor, w1, b1, w2, b2, w3, b3, keep: bool, linear=_linear_rows):
    """GLU of the rows of x (M, d) → (y, (h1, h2) if `keep`): h1 = W1·x + b1, h2 = W2·x + b2 (pre-activations),
    y = W3·(silu(h1) ⊙ h2) + b3. Without `keep` the epilogue runs in place (h1 becomes the GLU's product).
    `linear(x, w, b)` computes x·Wᵀ + b (an engine's own GEMM may stand in, with its own form of w)."""
    h1, h2 = linear(x, w1, b1), linear(x, w2, b2)
    product = F.silu(h1) * h2 if keep else F.silu(h1, inplace=True).mul_(h2)
    return linear(product, w3, b3), ((h1, h2) if keep else ())


def _unit_rows(a: torch.Tensor, unit_params, eps: float, mode: str | None, linear=_linear_rows):
    """One residual unit on the rows of a (M, d): LN(a + GLU_n(…GLU_1(a))). `unit_params` = (γ, β, then six tensors
    per GLU). Returns the output and what backward needs: per GLU its input (`mode` "inputs") or its input and
    pre-activations ("store"), then the LayerNorm's input, mean and 1/σ; nothing for `mode` None (no gradient)."""
    ln_w, ln_b, glus = unit_params[0], unit_params[1], unit_params[2:]
    x, saved = a, []
    for k in range(0, len(glus), 6):
        y, pre = _glu_rows(x, *glus[k : k + 6], keep=mode == "store", linear=linear)
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


def units_in_blocks(
    a: torch.Tensor, params, per_unit: int, block: int, eps: float, mode: str | None, linear=_linear_rows
):
    """Every unit on each block of `block` rows of a (M, d) in turn → (output, what backward needs, block by block
    and unit by unit); `params` holds `per_unit` tensors per unit (`fused_params`), `mode` as in `_unit_rows`,
    `linear` as in `_glu_rows`."""
    units = [params[i : i + per_unit] for i in range(0, len(params), per_unit)]
    outputs, saved = [], []
    for rows in a.split(block):
        for unit in units:
            rows, kept = _unit_rows(rows, unit, eps, mode, linear)
            saved += kept
        outputs.append(rows)
    return (outputs[0] if len(outputs) == 1 else torch.cat(outputs)), saved


class FusedResidualUnits(torch.autograd.Function):
    """The metric learner's residual units on the rows of A (M, d) as one autograd node with a hand-written
    backward: the same maths as the modules (`PldrllmResidualUnit`), with fewer passes over the 170-wide
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
        out, saved = units_in_blocks(a, params, per_unit, block, eps, mode)
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


def is_plain(units) -> bool:
    """Whether the units are the stock modules with nothing wrapped around them (no PEFT layer, forward hook or
    replaced forward, e.g. accelerate's offloading) and hold plain floating-point tensors (not a quantizer's tensor
    subclass, which only `nn.Linear.forward` dispatches), so the fused path computes exactly what calling them would."""
    stock = (nn.ModuleList, PldrllmResidualUnit, PldrllmGLU, nn.Linear, nn.LayerNorm)
    return all(
        type(m) in stock and not (m._forward_hooks or m._forward_pre_hooks or "forward" in m.__dict__)
        for m in units.modules()
    ) and all(type(p) in (torch.Tensor, nn.Parameter) and p.is_floating_point() for p in units.parameters())


def fused_params(units, weight=lambda linear: linear.weight) -> list:
    """The units' tensors in `FusedResidualUnits` order: per unit γ, β, then W1, b1, W2, b2, W3, b3 per GLU.
    `weight(linear)` gives what stands for each linear layer's weight (the form an engine's GEMM in `linear=` takes)."""
    params = []
    for unit in units:
        params += [unit.layernormA.weight, unit.layernormA.bias]
        for glu in unit.denseAs:
            for linear in (glu.gluw1, glu.gluw2, glu.gluw3):
                params += [weight(linear), linear.bias]
    return params


def fused_units(a: torch.Tensor, units, recompute: bool) -> torch.Tensor:
    """The residual units on the rows of A (M, d) through `FusedResidualUnits`, float32 whatever the model dtype
    (the casts are autograd-tracked, so bf16 parameters get their gradients). `recompute`: keep only each GLU's
    d-wide input for backward."""
    a = a.float()
    params = [None if p is None else p.float() for p in fused_params(units)]
    eps = units[0].layernormA.eps
    # the row blocks keep activations in a CPU core's cache; an accelerator wants one launch per GEMM, and a traced
    # graph (torch.compile, torch.export, ONNX) one block whatever the batch, or it would be specialised to its size
    block = FUSED_BLOCK_ROWS if a.device.type == "cpu" and not torch.compiler.is_compiling() else max(a.shape[0], 1)
    per_unit = len(params) // len(units)
    if not (torch.is_grad_enabled() and (a.requires_grad or any(p is not None and p.requires_grad for p in params))):
        return units_in_blocks(a, params, per_unit, block, eps, None)[0]
    mode = "inputs" if recompute else "store"
    return FusedResidualUnits.apply(a, mode, block, eps, per_unit, *params)
