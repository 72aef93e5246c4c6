"""Diagnostics of a PLDR-LLM's deductive outputs: is G input-invariant, and is the model "collapsed"?

Sources: arXiv 2603.23539 (order parameters), github.com/burcgokden/PLDR-LLM-Math-Foundations (the audit
checks of collapsed checkpoints). The maths of the order
parameters and of the DAG value is imported from the modeling file (`order_parameter_by_layer`, `order_parameter_rms`,
`dag_loss`), so these numbers are the ones `PldrllmForCausalLM.collapse()` decides on.

Symbols (paper → meaning → where it comes from here):

| symbol | meaning                                                  | code                                          |
|--------|----------------------------------------------------------|-----------------------------------------------|
| A      | metric tensor, output of the residual metric learner      | `model(..., output_pldr_attentions=True)`     |
|        | (d×d per layer and head)                                 | `.pldr_attentions[l][0]`; `"A"` below          |
| A_LM   | iSwiGLU(W·A + b) + ε, entrywise positive                  | `pldr_attentions[l][1]`; `"A_LM"`              |
| A_P    | A_LM^∘P (elementwise power)                               | `pldr_attentions[l][2]`; `"A_P"`               |
| G_LM   | a·A_P + b_a, the bilinear form of the scores q_rot·G·kᵀ   | `pldr_attentions[l][3]`; `"G_LM"`              |
| x_C    | a tensor as the KV + G cache holds it: from the prompt    | `prompt` outputs in `diagnose()`               |
| x_1    | the same tensor recomputed without cache over prompt +    | `full` outputs in `diagnose()`                 |
|        | continuation                                             |                                               |
| σ_i    | singular values of A, descending                          | `singular_value_spectrum`                     |
| Π_comm | orthogonal projection on the RoPE commutant               | `rope_commutant_projection`                   |

Which order-parameter definition each number uses (the two must not be mixed: they differ in scale). Every one is
computed per layer; the headline of each is the **maximum over layers** of its per-layer values, so a headline is
always one of the per-layer numbers printed beside it. The `*_pooled` values pool all layers into one statistic
(one RMSE over one |mean|, which layers with means of opposite sign can inflate far above every layer's value):

- `order_parameter` / `order_parameter_per_layer` / `order_parameter_pooled` — **SOC definition, prompt vs
  continuation** (arXiv 2603.23539): RMSE(x_1 − x_C) / |mean(x_C)| over the heads and inputs of a layer. x_C comes
  from the prompt alone, x_1 from one no-cache forward over prompt + a greedy continuation of `new_tokens` tokens
  (the paper samples the continuation with top-p; greedy keeps the diagnostic deterministic). ≈ 0 near
  criticality; unbounded.
- `order_parameter_rms` / `order_parameter_rms_per_layer` — **audit definition, prompt vs continuation**
  (github.com/burcgokden/PLDR-LLM-Math-Foundations): RMS(x_1 − x_C) / ½(RMS(x_1) + RMS(x_C)) per (input, layer),
  maximum over inputs. The audit compares two sampled continuations of one prompt; here the pair is (prompt,
  prompt + continuation). Bounded by 2.
- `order_parameter_inputs` / `order_parameter_inputs_per_layer` / `order_parameter_inputs_pooled` — **SOC
  definition across inputs**: each prompt's tensors against the first prompt's. The headline is the statistic
  `collapse()` compares with its tolerance (on G_LM).

The other checks (those of the audit repository above):

- rank-one audit of A: σ₂/σ₁ per layer and head (maximum over inputs), the numerical rank (σ_i > d·ε_fp32·σ₁), and
  whether the d rows are identical (A = 1·αᵀ: max |A_ij − A_0j| ≤ `rtol`·max |A|). Collapsed checkpoints have
  σ₂/σ₁ ≈ 1e-16 and identical rows; a random initialisation has rank ≈ d.
- cross-head spread of A: max over head pairs of RMS(A_h − A_h') (absolute, as in the audit) and the same divided by
  the mean RMS(A_h); 0 when every head's metric learner output is the same constant.
- RoPE-commutant residual of G_LM: ‖G − Π_comm G‖_F / ‖G‖_F. The matrices commuting with every RoPE rotation are
  block-diagonal in the RoPE pairs with 2×2 blocks [[a, −b], [b, a]]; only such a G could be folded into W_q.
- Perron–Frobenius check of A_LM: entrywise positive, and its eigenvalue of largest modulus real and positive with
  an entrywise positive eigenvector; also |λ₂|/λ₁.
- DAG value of each deductive tensor per layer, in the reference log-ratio form |ln(tr e^{M∘M}/d)| (`dag_loss`),
  averaged over inputs and heads.

For a collapsed or fixed-G model every input sees the same G, so the order parameters are 0 by construction; for
the released fixed-G format (`custom_G_type`, no PLGA tensors) A_P is unknown and reported as None.
"""

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from plldr_hf.models.pldrllm.collapse import (
    DEDUCTIVE_TENSORS,
    calibration_ids,
    order_parameter_by_layer,
    order_parameter_rms,
)
from plldr_hf.models.pldrllm.configuration_pldrllm import check_field
from plldr_hf.models.pldrllm.dag import dag_loss
from plldr_hf.models.pldrllm.stages import CHAIN, deductive_outputs, format_stages, stage_statistics


FP32_EPS = torch.finfo(torch.float32).eps

_logger = logging.getLogger(__name__)


def singular_value_spectrum(a: torch.Tensor) -> torch.Tensor:
    """σ_i / σ₁ of each d×d matrix in `a` (..., d, d), descending, float64: (..., d). All zeros for a zero matrix."""
    s = torch.linalg.svdvals(a.double())
    top = s[..., :1]
    return torch.where(top > 0, s / top.clamp_min(torch.finfo(s.dtype).tiny), torch.zeros_like(s))


def rank_one_audit(a: torch.Tensor, rtol: float = 1e-5) -> dict[str, torch.Tensor]:
    """Rank-one audit of each d×d matrix in `a` (..., d, d), as in the audit of collapsed checkpoints.

    Returns `sigma_ratio` σ₂/σ₁, `numerical_rank` (number of σ_i > d·ε_fp32·σ₁), `row_spread`
    max_ij |A_ij − A_0j| / max |A| and `rows_identical` (row_spread ≤ rtol), each of shape (...).
    """
    a = a.double()
    spectrum = singular_value_spectrum(a)
    d = a.shape[-1]
    scale = a.abs().amax(dim=(-2, -1))
    spread = (a - a[..., :1, :]).abs().amax(dim=(-2, -1))
    row_spread = torch.where(scale > 0, spread / scale.clamp_min(torch.finfo(a.dtype).tiny), torch.zeros_like(spread))
    return {
        "sigma_ratio": spectrum[..., 1] if d > 1 else torch.zeros_like(scale),
        "numerical_rank": (spectrum > d * FP32_EPS).sum(-1),
        "row_spread": row_spread,
        "rows_identical": row_spread <= rtol,
    }


def cross_head_spread(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Max over head pairs of RMS(A_h − A_h') for `a` (..., H, d, d): (absolute (...), relative (...)).

    The relative value divides by the mean over heads of RMS(A_h); both are 0 when all heads carry the same matrix.
    """
    a = a.double()
    num_heads = a.shape[-3]
    if num_heads < 2:
        zero = torch.zeros(a.shape[:-3], dtype=a.dtype)
        return zero, zero
    flat = a.flatten(-2)  # (..., H, d²); RMS over d² entries = Euclidean distance / d
    distances = torch.cdist(flat, flat, compute_mode="donot_use_mm_for_euclid_dist")  # (..., H, H), exact zeros
    absolute = distances.amax(dim=(-2, -1)) / a.shape[-1]
    scale = a.pow(2).mean(dim=(-2, -1)).sqrt().mean(-1)
    relative = torch.where(scale > 0, absolute / scale.clamp_min(torch.finfo(a.dtype).tiny), torch.zeros_like(scale))
    return absolute, relative


def _rope_pair_order(head_dim: int, reference_rope: bool) -> torch.Tensor:
    """Index order that puts each RoPE pair next to each other: (2i, 2i+1) interleaved, (i, i + d/2) for NeoX."""
    if reference_rope:
        return torch.arange(head_dim)
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half) + half), dim=-1).flatten()


def rope_commutant_projection(g: torch.Tensor, reference_rope: bool = True) -> torch.Tensor:
    """Frobenius-orthogonal projection of each d×d matrix in `g` (..., d, d) on the RoPE commutant (the matrices that commute with every RoPE rotation).

    RoPE at position p rotates pair i by p·θ_i with distinct θ_i, so the matrices that commute with every rotation are
    block-diagonal over the pairs with 2×2 blocks a·I + b·J (J the 90° rotation). The projection keeps, per pair
    block B, a = (B₀₀ + B₁₁)/2 and b = (B₁₀ − B₀₁)/2 and zeroes every entry outside the pair blocks.
    """
    d = g.shape[-1]
    order = _rope_pair_order(d, reference_rope).to(g.device)
    inverse = torch.argsort(order)
    gp = g[..., order, :][..., :, order]
    blocks = gp.reshape(*g.shape[:-2], d // 2, 2, d // 2, 2).diagonal(dim1=-4, dim2=-2)  # (..., 2, 2, d/2)
    a = 0.5 * (blocks[..., 0, 0, :] + blocks[..., 1, 1, :])
    b = 0.5 * (blocks[..., 1, 0, :] - blocks[..., 0, 1, :])
    projected = torch.zeros_like(gp)
    idx = torch.arange(0, d, 2, device=g.device)
    projected[..., idx, idx] = a
    projected[..., idx + 1, idx + 1] = a
    projected[..., idx + 1, idx] = b
    projected[..., idx, idx + 1] = -b
    return projected[..., inverse, :][..., :, inverse]


def rope_commutant_residual(g: torch.Tensor, reference_rope: bool = True) -> torch.Tensor:
    """‖G − Π_comm G‖_F / ‖G‖_F for each d×d matrix in `g` (..., d, d): 0 if G commutes with RoPE, ≈ 1 if random."""
    g = g.double()
    residual = torch.linalg.matrix_norm(g - rope_commutant_projection(g, reference_rope))
    norm = torch.linalg.matrix_norm(g)
    return torch.where(norm > 0, residual / norm.clamp_min(torch.finfo(g.dtype).tiny), torch.zeros_like(norm))


def perron_frobenius(a_lm: torch.Tensor, rtol: float = 1e-8) -> dict[str, torch.Tensor]:
    """Perron–Frobenius check of each d×d matrix in `a_lm` (..., d, d), float64.

    Returns `min_entry`, `entrywise_positive`, `perron_root` (real part of the eigenvalue of largest modulus),
    `dominant_real_positive` (that eigenvalue is real within `rtol` and > 0), `perron_vector_positive` (its
    eigenvector has one sign), `spectral_gap` |λ₂|/|λ₁|, and `holds` (all three checks), each of shape (...).
    """
    m = a_lm.double()
    eigenvalues, eigenvectors = torch.linalg.eig(m)
    modulus = eigenvalues.abs()
    order = modulus.argsort(dim=-1, descending=True)
    top = order[..., 0]
    lam = eigenvalues.gather(-1, top[..., None])[..., 0]
    vec = eigenvectors.gather(-1, top[..., None, None].expand(*top.shape, m.shape[-1], 1))[..., 0]
    # eigenvectors carry an arbitrary complex phase; rotate it to the entry of largest modulus before the sign test
    pivot = vec.gather(-1, vec.abs().argmax(-1, keepdim=True))
    vec = vec * (pivot.abs() / pivot)
    real_vector = (vec.imag.abs() <= rtol * vec.abs().amax(-1, keepdim=True) + 1e-12).all(-1)
    vector_positive = (vec.real > 0).all(-1) & real_vector
    dominant = (lam.imag.abs() <= rtol * lam.abs()) & (lam.real > 0)
    second = modulus.gather(-1, order[..., 1:2])[..., 0] if m.shape[-1] > 1 else torch.zeros_like(lam.real)
    min_entry = m.amin(dim=(-2, -1))
    positive = min_entry > 0
    return {
        "min_entry": min_entry,
        "entrywise_positive": positive,
        "perron_root": lam.real,
        "dominant_real_positive": dominant,
        "perron_vector_positive": vector_positive,
        "spectral_gap": second / lam.abs().clamp_min(torch.finfo(m.dtype).tiny),
        "holds": positive & dominant & vector_positive,
    }


def dag_values_per_layer(samples: torch.Tensor, form: str = "log_ratio") -> list[float]:
    """DAG value (`dag_loss`, reference log-ratio form by default) per layer of `samples` (N, L, H, d, d), averaged
    over inputs and heads."""
    return [dag_loss(samples[:, layer], form).item() for layer in range(samples.shape[1])]


def _g_mode(config) -> str:
    if config.custom_G_type is not None:
        return f"fixed (custom_G_type={config.custom_G_type!r})"
    return "collapsed" if config.collapsed else "learned"


def _greedy_continuation(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            use_cache=True,
        )


def _nan_to_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _tolist(t: torch.Tensor):
    return t.tolist()


@dataclass
class DiagnosticsReport:
    """Numbers measured by `diagnose()`; see the module docstring for each definition.

    Per-layer lists have length L; per-(layer, head) lists are L lists of H values. Values that cannot be computed
    (A_P of a model without PLGA tensors) are None.
    """

    g_mode: str
    num_layers: int
    num_heads: int
    head_dim: int
    num_inputs: int
    input_lengths: list
    new_tokens: int
    rtol: float
    order_parameter: dict
    order_parameter_per_layer: dict
    order_parameter_rms: dict
    order_parameter_rms_per_layer: dict
    order_parameter_inputs: dict
    order_parameter_inputs_per_layer: dict
    order_parameter_pooled: dict
    order_parameter_inputs_pooled: dict
    sigma_ratio: list
    numerical_rank: list
    rows_identical: list
    row_spread: list
    singular_values: list
    cross_head_rms: list
    cross_head_relative: list
    commutant_residual: list
    perron_frobenius: dict
    dag: dict
    dag_form: str = "log_ratio"
    notes: list = field(default_factory=list)
    # where the variation across inputs is made or lost, stage by stage (`stages.stage_statistics`)
    stages: dict | None = None

    # what each saved order parameter aggregates (written into `to_dict()`, so the JSON file says it too)
    AGGREGATION = {
        "order_parameter": "SOC RMSE/abs(mean), prompt vs prompt+continuation, max over layers",
        "order_parameter_per_layer": "SOC RMSE/abs(mean), prompt vs prompt+continuation, per layer",
        "order_parameter_pooled": "SOC RMSE/abs(mean), prompt vs prompt+continuation, pooled over all layers",
        "order_parameter_rms": "audit RMS(x1-x2)/mean RMS, prompt vs prompt+continuation, max over inputs and layers",
        "order_parameter_rms_per_layer": "audit RMS(x1-x2)/mean RMS, prompt vs prompt+continuation, max over inputs, "
        "per layer",
        "order_parameter_inputs": "SOC RMSE/abs(mean), across inputs, max over layers (collapse criterion)",
        "order_parameter_inputs_per_layer": "SOC RMSE/abs(mean), across inputs, per layer",
        "order_parameter_inputs_pooled": "SOC RMSE/abs(mean), across inputs, pooled over all layers",
    }

    def to_dict(self) -> dict:
        return {**_clean(asdict(self)), "aggregation": dict(self.AGGREGATION)}

    def to_json(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    def format_table(self) -> str:
        """Markdown tables: the order parameters per tensor type, then the per-layer audit."""

        def fmt(value, spec=".3g"):
            return "n/a" if value is None else format(value, spec)

        lines = [
            f"PLDR-LLM diagnostics: G {self.g_mode}; {self.num_inputs} inputs (lengths {self.input_lengths}), "
            f"continuation {self.new_tokens} greedy tokens",
            "",
            "Order parameters, each the maximum over layers of the per-layer values below (pooled: all layers as one "
            "statistic):",
            "",
            "| tensor | SOC across inputs, max over layers (collapse criterion) | SOC across inputs, pooled "
            "| SOC prompt vs +continuation, max over layers | SOC prompt vs +continuation, pooled "
            "| audit RMS prompt vs +continuation, max over layers |",
            "|---|---|---|---|---|---|",
        ]
        for name in DEDUCTIVE_TENSORS:
            lines.append(
                f"| {name} | {fmt(self.order_parameter_inputs[name])} | {fmt(self.order_parameter_inputs_pooled[name])} "
                f"| {fmt(self.order_parameter[name])} | {fmt(self.order_parameter_pooled[name])} "
                f"| {fmt(self.order_parameter_rms[name])} |"
            )
        lines += [
            "",
            "| layer | G_LM SOC across inputs | G_LM SOC prompt vs +continuation | G_LM audit RMS "
            "| A σ₂/σ₁ (max over heads) | A rank (max) | A rows identical | A cross-head RMS "
            "| G commutant residual (median) | A_LM Perron–Frobenius | DAG A_LM | DAG A_P | DAG G_LM |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        pf = self.perron_frobenius["holds"]
        for layer in range(self.num_layers):
            residuals = sorted(self.commutant_residual[layer])
            median = residuals[len(residuals) // 2]
            identical = sum(self.rows_identical[layer])
            lines.append(
                f"| {layer} | {fmt(self.order_parameter_inputs_per_layer['G_LM'][layer])} "
                f"| {fmt(self.order_parameter_per_layer['G_LM'][layer])} "
                f"| {fmt(self.order_parameter_rms_per_layer['G_LM'][layer])} "
                f"| {fmt(max(self.sigma_ratio[layer]))} | {max(self.numerical_rank[layer])} "
                f"| {identical}/{self.num_heads} heads | {fmt(self.cross_head_rms[layer])} | {fmt(median, '.3f')} "
                f"| {sum(pf[layer])}/{self.num_heads} heads | {fmt(self.dag['A_LM'][layer])} "
                f"| {fmt(self.dag['A_P'][layer])} | {fmt(self.dag['G_LM'][layer])} |"
            )
        if self.stages is not None:
            lines += ["", format_stages(self.stages)]
        if self.notes:
            lines += [""] + [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return _nan_to_none(value)


def _stack(outputs: list[dict], name: str) -> torch.Tensor:
    return torch.stack([out[name] for out in outputs])  # (N, L, H, d, d)


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


@torch.no_grad()
def diagnose(model, inputs=None, tokenizer=None, new_tokens: int = 16, rtol: float = 1e-5) -> DiagnosticsReport:
    """Measure the order parameters and the collapse checks of a `PldrllmForCausalLM` (module docstring).

    `inputs`: None (the empty prompt `[eos]` plus seeded random sequences), a 2D id tensor, lists of ids, or texts
    with `tokenizer`. Each input is one unpadded prompt; `new_tokens` greedy tokens are appended for the SOC-style
    order parameter. `rtol` decides when the rows of A count as identical.
    """
    config = model.config
    if getattr(config, "model_type", None) != "pldrllm":
        raise ValueError(f"diagnose(): expected a PLDR-LLM model (model_type 'pldrllm'), got {config.model_type!r}")
    check_field("diagnose(): ", "new_tokens", new_tokens, "int", low=1)
    check_field("diagnose(): ", "rtol", rtol, "number", low=0.0)
    max_len = config.max_position_embeddings - new_tokens
    if max_len < 1:
        raise ValueError(
            f"diagnose(): new_tokens={new_tokens} leaves no room for a prompt within max_position_embeddings="
            f"{config.max_position_embeddings}"
        )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        # prompts longer than the room left for the continuation are truncated (the reference RoPE table ends there)
        sequences = [seq[:max_len] for seq in calibration_ids(config, inputs, tokenizer, "diagnose()")]
        if not sequences:
            raise ValueError("diagnose(): no non-empty input sequence")
        prompt_outputs, full_outputs = [], []
        for seq in sequences:
            prompt = torch.tensor([seq], dtype=torch.long, device=device)
            prompt_outputs.append(deductive_outputs(model, prompt))
            full_outputs.append(deductive_outputs(model, _greedy_continuation(model, prompt, new_tokens)))
        finite = all(_finite(o["G_LM"]) for o in prompt_outputs)
        stages = stage_statistics(model, sequences, prompt_outputs) if finite else None
    finally:
        model.train(was_training)
    for name in ("A", "G_LM"):
        if not all(_finite(outputs[name]) for outputs in prompt_outputs + full_outputs):
            # a diverged model (NaN or infinite weights or activations): no number below would mean anything
            raise ValueError(
                f"diagnose(): the model's {name} is not finite (NaN or infinite) on the calibration inputs; the "
                "weights or activations have diverged (check the training run: learning rate, warm-up, clipping)"
            )

    notes = []
    order, order_layer, order_rms, order_rms_layer, order_inputs, order_inputs_layer, dag = {}, {}, {}, {}, {}, {}, {}
    pooled, inputs_pooled = {}, {}
    num_layers = config.num_hidden_layers
    for name in DEDUCTIVE_TENSORS:
        x_c, x_1 = _stack(prompt_outputs, name), _stack(full_outputs, name)
        if not (_finite(x_c) and _finite(x_1)):
            notes.append(f"{name} is not available (fixed-G model without the power-law tensors) or not finite")
            order[name] = order_rms[name] = order_inputs[name] = pooled[name] = inputs_pooled[name] = None
            order_layer[name] = order_rms_layer[name] = order_inputs_layer[name] = dag[name] = [None] * num_layers
            continue
        order[name], order_layer[name], pooled[name] = order_parameter_by_layer(x_1, x_c)
        order_rms_layer[name] = [
            max(order_parameter_rms(x_1[n, layer], x_c[n, layer]) for n in range(len(sequences)))
            for layer in range(num_layers)
        ]
        order_rms[name] = max(order_rms_layer[name])
        order_inputs[name], order_inputs_layer[name], inputs_pooled[name] = order_parameter_by_layer(x_c, x_c[:1])
        dag[name] = dag_values_per_layer(x_c)
    if len(sequences) < 2:
        notes.append("one input only: the order parameter across inputs is 0 by definition")

    a = _stack(prompt_outputs, "A")  # (N, L, H, d, d)
    audit = rank_one_audit(a, rtol)
    absolute, relative = cross_head_spread(a)
    # G as the cache (or the collapsed buffer) holds it for the first prompt
    g_ref = prompt_outputs[0]["G_LM"]
    residual = rope_commutant_residual(g_ref, config.reference_rope)
    pf = perron_frobenius(prompt_outputs[0]["A_LM"])
    return DiagnosticsReport(
        g_mode=_g_mode(config),
        num_layers=num_layers,
        num_heads=config.num_attention_heads,
        head_dim=config.head_dim,
        num_inputs=len(sequences),
        input_lengths=[len(seq) for seq in sequences],
        new_tokens=new_tokens,
        rtol=rtol,
        order_parameter=order,
        order_parameter_per_layer=order_layer,
        order_parameter_rms=order_rms,
        order_parameter_rms_per_layer=order_rms_layer,
        order_parameter_inputs=order_inputs,
        order_parameter_inputs_per_layer=order_inputs_layer,
        order_parameter_pooled=pooled,
        order_parameter_inputs_pooled=inputs_pooled,
        sigma_ratio=_tolist(audit["sigma_ratio"].amax(0)),
        numerical_rank=_tolist(audit["numerical_rank"].amax(0)),
        rows_identical=_tolist(audit["rows_identical"].all(0)),
        row_spread=_tolist(audit["row_spread"].amax(0)),
        singular_values=_tolist(singular_value_spectrum(a[0])),
        cross_head_rms=_tolist(absolute.amax(0)),
        cross_head_relative=_tolist(relative.amax(0)),
        commutant_residual=_tolist(residual),
        perron_frobenius={key: _tolist(value) for key, value in pf.items()},
        dag=dag,
        notes=notes,
        stages=stages,
    )


__all__ = [
    "DiagnosticsReport",
    "cross_head_spread",
    "dag_values_per_layer",
    "deductive_outputs",
    "diagnose",
    "order_parameters",
    "perron_frobenius",
    "rank_one_audit",
    "rope_commutant_projection",
    "rope_commutant_residual",
    "singular_value_spectrum",
]


def order_parameters(model, calibration=None, new_tokens: int = 16) -> dict | None:
    """Order parameters of A, A_LM, A_P, G_LM from `diagnose` (the model is not changed), as training reports them.

    Both are the SOC statistic RMSE(x − x_ref)/|mean(x_ref)| per layer, **maximum over layers** (the keys say what
    is compared): `"across_inputs_max_over_layers"` (the headline, and what `collapse()` tests) between the
    calibration inputs, x_ref the first one; `"prompt_vs_continuation_max_over_layers"` between each prompt and the
    prompt plus `new_tokens` greedy tokens (the SOC definition of arXiv 2603.23539). `calibration` None: the default
    calibration of `collapse()` and `plldr-hf diagnose` (`default_calibration`), so the three report the same
    number for one model. ≈ 0 means input-invariant (near-critical); order 1 and above, sub-critical. None for
    models without a learned G (the Llama baseline, a fixed-G or collapsed PLDR-LLM).
    """
    if hasattr(model, "get_base_model"):
        # a PEFT model: its base model, adapters included (they are layers inside it)
        model = model.get_base_model()
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "pldrllm" or config.has_fixed_G:
        return None
    try:
        report = diagnose(model, inputs=calibration, new_tokens=new_tokens)
    except ValueError as error:
        # a diverged model: say so instead of dying after the whole run
        _logger.warning("order parameters not measured: %s", error)
        return None
    measured = {
        "across_inputs_max_over_layers": dict(report.order_parameter_inputs),
        "prompt_vs_continuation_max_over_layers": dict(report.order_parameter),
    }
    if report.stages is not None:
        # the stages' relative spreads (scale-robust) and G_LM's SOC numerator and denominator, each the value of
        # the layer whose G_LM order parameter is largest (the headline's layer)
        layers = report.stages["layers"]
        worst = max(range(len(layers)), key=lambda i: layers[i]["G_LM"]["order_parameter"])
        layer = layers[worst]
        measured["stages_of_the_headline_layer"] = {
            "layer": worst,
            **{f"relative_{name}": (layer.get(name) or {}).get("relative") for name in CHAIN},
            "G_LM_soc_numerator_rmse": layer["G_LM"]["numerator_rmse"],
            "G_LM_soc_denominator_abs_mean": layer["G_LM"]["denominator_abs_mean"],
        }
    return measured
