"""Where a PLDR-LLM's G stays input-dependent: the variation across inputs measured at each stage of PLGA.

The mechanism of arXiv 2603.23539 makes G_LM input-invariant in three stages: the normalised Gram matrix of the
rotated queries concentrates (more so over longer contexts), the metric learner's residual units contract what is
left on the inputs they visit, and the power-law map carries the result to G. A model that does not collapse is
stuck at one of them; the SOC order parameter of G alone cannot say which, and its denominator |mean(G_LM)| can
make it large for a G that hardly varies. Per layer, across the calibration inputs:

| stage | tensor | code |
|---|---|---|
| concentration | LN(A0), the Gram matrix q_rotᵀ·q_rot after the metric learner's LayerNorm | `gram_ln` |
| contraction | A, the metric learner's output | `A` |
| pre-activation | W·A and b of A_LM = iSwiGLU(W·A + b) + ε | `W_A`, `rms_b` |
| positive map | A_LM | `A_LM` |
| power law | A_P = A_LM^∘P, with P and the sensitivity \\|P\\|·\\|ln A_LM\\| | `A_P`, `P_mean`, `sensitivity` |
| bilinear form | G_LM = a·A_P + b_a, with mean(G) and spread(G) apart | `G_LM` |

Each tensor gets `spread` (RMS over inputs and entries of x − mean over inputs), `rms`, `mean` (of all values) and
`relative` = spread / rms, a scale-robust invariance measure (0: input-invariant; order 1: as large as the tensor).
A stage's `factor` is the relative spread after it over the one before it (below 1: it contracts). For G_LM the SOC
order parameter of `diagnose()` is kept with its numerator RMSE(x − x_ref) and denominator |mean(x_ref)| (x_ref: the
first input), so a large value can be told apart from a small mean. `deviation_by_input` gives each input's
RMS(x − mean)/rms of LN(A0) and G_LM, in the order of the inputs (with their lengths: concentration with length).
"""

from __future__ import annotations

import torch

from plldr_hf.models.pldrllm.collapse import DEDUCTIVE_TENSORS


# the chain of tensors whose relative spread is compared stage by stage, and how tables, plots and logs name them
CHAIN = ("gram_ln", "A", "W_A", "A_LM", "A_P", "G_LM")
LABELS = {"gram_ln": "LN(A0)", "A": "A", "W_A": "W·A", "A_LM": "A_LM", "A_P": "A_P", "G_LM": "G_LM"}


def _statistics(x: torch.Tensor) -> dict:
    """spread / rms / mean / relative of samples `x` (N, ...) across the first dimension, in float64."""
    x = x.double()
    spread = (x - x.mean(0, keepdim=True)).pow(2).mean().sqrt().item()
    rms = x.pow(2).mean().sqrt().item()
    return {"spread": spread, "rms": rms, "mean": x.mean().item(), "relative": spread / rms if rms > 0 else None}


def _deviation_by_input(x: torch.Tensor) -> list[float]:
    x = x.double()
    rms = x.pow(2).mean().sqrt()
    deviation = (x - x.mean(0, keepdim=True)).flatten(1).pow(2).mean(1).sqrt()
    return (deviation / rms).tolist() if rms > 0 else [0.0] * len(x)


def _soc(x: torch.Tensor) -> dict:
    """The SOC order parameter across inputs (RMSE against the first input over |mean of the first input|), with its
    numerator and denominator."""
    x = x.double()
    numerator = (x - x[:1]).pow(2).mean().sqrt().item()
    denominator = x[:1].mean().abs().item()
    value = 0.0 if numerator == 0 else (numerator / denominator if denominator > 0 else float("inf"))
    return {"order_parameter": value, "numerator_rmse": numerator, "denominator_abs_mean": denominator}


def capture_gram_ln(model) -> tuple[list, list]:
    """Forward hooks that keep each layer's LN(A0) (the metric learner's LayerNorm output)."""
    captured, handles = [], []
    for attention in _attentions(model):
        norm = getattr(attention, "layernorm1", None)
        if norm is None:
            captured.append(None)
            continue
        slot = len(captured)
        captured.append(None)

        def keep(_module, _inputs, output, slot=slot):
            captured[slot] = output.detach()

        handles.append(norm.register_forward_hook(keep))
    return captured, handles


def deductive_outputs(model, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """(A, A_LM, A_P, G_LM) of one no-cache forward of `input_ids` (1, S), each float32 (L, H, d, d) on the CPU, and
    `gram_ln`, LN(A0), from the same forward where every layer runs its metric learner (a learned G)."""
    captured, handles = capture_gram_ln(model)
    try:
        with torch.no_grad():
            out = model(input_ids, use_cache=False, output_pldr_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    outputs = {
        name: torch.stack([layer[i][0] for layer in out.pldr_attentions]).float().cpu()
        for i, name in enumerate(DEDUCTIVE_TENSORS)
    }
    if captured and all(gram is not None for gram in captured):
        outputs["gram_ln"] = torch.stack([gram[0] for gram in captured]).float().cpu()
    return outputs


def stage_statistics(model, sequences: list[list[int]], outputs: list[dict] | None = None) -> dict | None:
    """The stage-by-stage statistics of a PLDR-LLM with a learned G over `sequences` (lists of ids, each one
    unpadded input; at least two). `outputs`: their `deductive_outputs`, when the caller has them already (one
    forward per input is run otherwise). Returns `{"layers": [per-layer dict], "input_lengths": [...]}`, or None for
    a model without a learned G (nothing varies)."""
    if model.config.has_fixed_G or len(sequences) < 2:
        return None
    if outputs is None:
        device = next(model.parameters()).device
        outputs = [deductive_outputs(model, torch.tensor([seq], dtype=torch.long, device=device)) for seq in sequences]
    # (N, L, H, d, d) per tensor
    all_layers = {
        name: torch.stack([o[name] for o in outputs]) for name in ("gram_ln", *DEDUCTIVE_TENSORS) if name in outputs[0]
    }
    result = []
    for index, attention in enumerate(_attentions(model)):
        plga = attention.plgatt_layer
        stacked = {name: value[:, index] for name, value in all_layers.items()}
        with torch.no_grad():
            heads = attention.head_slice
            w, b, p = (t[heads].detach().double().cpu() for t in (plga.Wlst, plga.blst, plga.pwlst))
            stacked["W_A"] = torch.matmul(w, stacked["A"].double())
            # d ln A_P = P · d ln A_LM: how strongly the power step scales relative changes of A_LM
            sensitivity = (p.abs() * stacked["A_LM"].double().log().abs()).mean().item()
        layer = {name: _statistics(value) for name, value in stacked.items()}
        layer["rms_b"] = b.pow(2).mean().sqrt().item()
        layer["P_mean"], layer["P_min"], layer["P_max"] = p.mean().item(), p.min().item(), p.max().item()
        layer["sensitivity"] = sensitivity
        layer["G_LM"].update(_soc(stacked["G_LM"]))
        chain = [name for name in CHAIN if name in layer]
        layer["factors"] = {
            f"{before}->{after}": _ratio(layer[after]["relative"], layer[before]["relative"])
            for before, after in zip(chain, chain[1:])
        }
        layer["deviation_by_input"] = {
            name: _deviation_by_input(stacked[name]) for name in ("gram_ln", "G_LM") if name in stacked
        }
        result.append(layer)
    return {"input_lengths": [len(seq) for seq in sequences], "layers": result}


def strongest_contraction(layer: dict) -> str | None:
    """The stage whose factor is smallest in one layer of `stage_statistics` (`"LN(A0)→A"`: the metric learner's
    units), where most of the input dependence is removed; None when no factor is defined."""
    factors = {key: value for key, value in layer["factors"].items() if value is not None}
    if not factors:
        return None
    before, after = min(factors, key=factors.get).split("->")
    return f"{LABELS[before]}→{LABELS[after]}"


def _ratio(after, before):
    return None if after is None or not before else after / before


def _attentions(model):
    return [layer.mha1 for layer in model.decoder.dec_layers]


def format_stages(stages: dict) -> str:
    """A Markdown table of the stage statistics: per layer, the relative spread of each stage's tensor, the SOC order
    parameter of G with its numerator and denominator, the stage factors and the stage that contracts most."""

    def fmt(value):
        return "n/a" if value is None else format(value, ".3g")

    lines = [
        "Stages (relative spread across inputs = RMS(x - mean over inputs) / RMS(x); factor = after / before):",
        "",
        "| layer | LN(A0) | A | W·A | rms b | A_LM | P mean | mean abs(P)·abs(ln A_LM) | A_P | G_LM | mean G | spread G "
        "| SOC G = RMSE / abs(mean) | LN(A0)→A | A→W·A | W·A→A_LM | A_LM→A_P | A_P→G_LM | strongest contraction |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index, layer in enumerate(stages["layers"]):
        relative = {name: (layer.get(name) or {}).get("relative") for name in CHAIN}
        g = layer["G_LM"]
        factors = layer["factors"]
        lines.append(
            f"| {index} | {fmt(relative['gram_ln'])} | {fmt(relative['A'])} | {fmt(relative['W_A'])} "
            f"| {fmt(layer['rms_b'])} | {fmt(relative['A_LM'])} | {fmt(layer['P_mean'])} | {fmt(layer['sensitivity'])} "
            f"| {fmt(relative['A_P'])} | {fmt(relative['G_LM'])} | {fmt(g['mean'])} | {fmt(g['spread'])} "
            f"| {fmt(g['order_parameter'])} = {fmt(g['numerator_rmse'])} / {fmt(g['denominator_abs_mean'])} "
            + " ".join(
                f"| {fmt(factors.get(key))}" for key in ("gram_ln->A", "A->W_A", "W_A->A_LM", "A_LM->A_P", "A_P->G_LM")
            )
            + f" | {strongest_contraction(layer) or 'n/a'} |"
        )
    return "\n".join(lines)


__all__ = [
    "CHAIN",
    "LABELS",
    "capture_gram_ln",
    "deductive_outputs",
    "format_stages",
    "stage_statistics",
    "strongest_contraction",
]
