"""Every PNG the package writes: training curves, the PLDR-LLM diagnostics and the AGF coefficient curves.

| plot | function | written by |
|---|---|---|
| training / validation loss and DAG terms over steps | `plot_loss_curves` | `train_causal_lm`, the quickstart |
| order parameter per layer and tensor (bars) | `plot_order_parameters` | `DiagnosticsReport.save` (`plldr-hf diagnose`) |
| singular values of the metric tensor A | `plot_singular_values` | `DiagnosticsReport.save` |
| AGF coefficient c_h(δ) per module and head, initial dashed | `plot_coefficient_curves` | `plldr-hf plot-agf`, the quickstart |

AGF curves: one panel per AGF module (a layer's encoder self-, decoder self- or cross-attention, or one per stack when
the parameters are shared), one line per head, over the signed distance δ = query position − key position; they are
LC1·LC2 from `AgfPreTrainedModel.coefficient_curves` (LC3 is a per-feature weight without a distance and is not
drawn). `coefficient_change` says how far training moved them.

All figures: 100 dpi, legends outside the data, labelled axes (units where there are any).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from plldr_hf.models.pldrllm.modeling_pldrllm import DEDUCTIVE_TENSORS


if TYPE_CHECKING:
    from plldr_hf.diagnostics import DiagnosticsReport


__all__ = [
    "coefficient_change",
    "plot_agf",
    "plot_coefficient_curves",
    "plot_loss_curves",
    "plot_order_parameters",
    "plot_singular_values",
]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_loss_curves(log_history: list[dict], path: str | os.PathLike, title: str | None = None) -> Path:
    """Writes a PNG of the training loss, cross-entropy, validation loss and DAG components against the step."""
    plt = _pyplot()

    def series(key):
        points = [(entry["step"], entry[key]) for entry in log_history if key in entry and "step" in entry]
        return [p[0] for p in points], [p[1] for p in points]

    dag_keys = [k for k in ("dag_a_lm", "dag_a_p", "dag_g_lm") if series(k)[0]]
    fig, axes = plt.subplots(1, 2 if dag_keys else 1, figsize=(14 if dag_keys else 11, 4.8), squeeze=False)
    ax = axes[0][0]
    for key, label in (
        ("loss", "train loss"),
        ("lm_loss", "train cross-entropy"),
        ("eval_lm_loss", "val cross-entropy"),
    ):
        xs, ys = series(key)
        if xs:
            ax.plot(xs, ys, label=label, marker="o" if key.startswith("eval") else None)
    if not series("eval_lm_loss")[0]:
        xs, ys = series("eval_loss")
        if xs:
            ax.plot(xs, ys, label="val loss", marker="o")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title("training and validation loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if dag_keys:
        ax = axes[0][1]
        for key in dag_keys:
            xs, ys = series(key)
            ax.plot(xs, ys, label=key)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("DAG value, unweighted (dimensionless)")
        ax.set_title("DAG regulariser terms")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_order_parameters(report: DiagnosticsReport, path) -> None:
    """PNG: how input-dependent each deductive tensor is, per layer — grouped bars of the SOC order parameter across
    the calibration inputs (the collapse criterion, left) and between each prompt and its greedy continuation
    (right). A symmetric-log axis shows an exact 0 (input-invariant) as a bar of height 0."""
    plt = _pyplot()
    layers = list(range(report.num_layers))
    names = [n for n in DEDUCTIVE_TENSORS if report.order_parameter_inputs_per_layer[n][0] is not None]
    width = 0.8 / max(1, len(names))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    panels = (
        (axes[0], report.order_parameter_inputs_per_layer, "across calibration inputs (collapse criterion)"),
        (axes[1], report.order_parameter_per_layer, f"prompt vs prompt + {report.new_tokens} greedy tokens"),
    )
    for ax, values, title in panels:
        for i, name in enumerate(names):
            xs = [layer + (i - (len(names) - 1) / 2) * width for layer in layers]
            ax.bar(xs, values[name], width=width, label=name)
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_xticks(layers)
        ax.set_xlabel("decoder layer")
        ax.set_title(title, fontsize=11)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0].set_ylabel("order parameter RMSE / |mean| (dimensionless)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.88, 0.5), title="tensor")
    fig.suptitle(
        f"PLDR-LLM order parameter per layer (G {report.g_mode}; {report.num_inputs} inputs; 0 = input-invariant)",
        fontsize=12,
    )
    fig.tight_layout(rect=(0, 0, 0.87, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_singular_values(report: DiagnosticsReport, path) -> None:
    """PNG: the normalised singular values σ_i/σ₁ of the metric tensor A for the first input, one panel per layer
    and one line per head (a rank-one A is a single point at 1 and a drop to the floor)."""
    plt = _pyplot()
    cols = min(report.num_layers, 4)
    rows = math.ceil(report.num_layers / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(11, 3.2 * cols + 2), 4.2 * rows), squeeze=False)
    floor = float(torch.finfo(torch.float32).eps)
    for layer in range(rows * cols):
        ax = axes[layer // cols][layer % cols]
        if layer >= report.num_layers:
            ax.axis("off")
            continue
        for head, spectrum in enumerate(report.singular_values[layer]):
            ax.plot(range(1, len(spectrum) + 1), [max(v, floor) for v in spectrum], lw=1.0, label=f"head {head}")
        ax.set_yscale("log")
        ax.set_ylim(bottom=floor / 2)
        ax.set_title(f"layer {layer}", fontsize=11)
        ax.set_xlabel("singular value index i")
        ax.grid(True, which="both", alpha=0.3)
    for row in axes:
        row[0].set_ylabel("σ_i / σ₁ (float32 ε floor)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.9, 0.5), title="head", fontsize=9)
    fig.suptitle(f"Singular values of the metric tensor A (G {report.g_mode}; first calibration input)", fontsize=12)
    fig.tight_layout(rect=(0, 0, 0.89, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _panel_title(name: str) -> str:
    # "model.decoder.layers.1.encoder_attn.value_coefficient" -> "decoder 1 cross-attention (PCM-V)"
    parts = name.removeprefix("model.").split(".")
    stack = parts[0]
    layer = parts[2] if len(parts) > 2 and parts[1] == "layers" else "all layers"
    if "encoder_attn" in parts or parts[-1].startswith("cross_"):
        kind = "cross-attention"
    else:
        kind = "self-attention"
    suffix = " (PCM-V)" if parts[-1].endswith("value_coefficient") else ""
    return f"{stack} {layer} {kind}{suffix}"


def coefficient_change(model, max_distance: int = 64) -> dict[str, float] | None:
    """How far training moved the AGF curves from their initialisation, over |δ| ≤ `max_distance`: the largest
    |Δ log c_h(δ)| (`max_abs_log_change`; 0.69 means a factor of 2 somewhere) and the module / head where it is.
    None for a model without AGF curves."""
    trained = model.coefficient_curves(max_distance)
    if not trained:
        return None
    initial = model.coefficient_curves(max_distance, initial=True)
    best = (-1.0, "", 0)
    for name, (_, values) in trained.items():
        change = (values.log() - initial[name][1].log()).abs().amax(dim=1)
        head = int(change.argmax())
        if float(change[head]) > best[0]:
            best = (float(change[head]), name, head)
    return {"max_abs_log_change": best[0], "module": _panel_title(best[1]), "head": best[2]}


def plot_coefficient_curves(model, output_path: str | Path, max_distance: int = 64, dpi: int = 100) -> Path:
    """Draw `model.coefficient_curves(max_distance)` into a PNG at `output_path`, each head's initial curve dashed
    in the same colour; returns the path.

    Raises:
        ValueError: the model has no AGF coefficient (`position_encoding` other than `"agf"`, or LC1 and LC2 off).
    """
    plt = _pyplot()
    from matplotlib.lines import Line2D

    curves = model.coefficient_curves(max_distance)
    if not curves:
        position_encoding = getattr(model.config, "position_encoding", None)
        raise ValueError(
            f"no AGF coefficient to plot: position_encoding={position_encoding!r} (needs 'agf' with LC1 or LC2 on)"
        )
    initial = model.coefficient_curves(max_distance, initial=True)
    columns = min(3, len(curves))
    rows = math.ceil(len(curves) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(max(11, 4.2 * columns + 2), 3.6 * rows), squeeze=False)
    for axis, (name, (distances, values)) in zip(axes.flat, curves.items()):
        for head, (curve, start) in enumerate(zip(values.to(torch.float64), initial[name][1].to(torch.float64))):
            (line,) = axis.plot(distances.numpy(), curve.numpy(), label=f"head {head}", linewidth=1.4)
            axis.plot(distances.numpy(), start.numpy(), color=line.get_color(), linewidth=0.9, linestyle="--")
        axis.set_title(_panel_title(name), fontsize=9)
        axis.set_xlabel("δ = query − key position (tokens)", fontsize=9)
        axis.set_ylabel("coefficient c_h(δ) (multiplies the logit)", fontsize=9)
        axis.set_yscale("log")
        axis.grid(True, alpha=0.3)
    for axis in list(axes.flat)[len(curves) :]:
        axis.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles.append(Line2D([], [], color="gray", linestyle="--", linewidth=0.9))
    labels.append("initial (dashed)")
    figure.legend(handles, labels, loc="center left", bbox_to_anchor=(0.9, 0.5), fontsize=9, title="head")
    figure.suptitle("AGF coefficient c_h(δ) = Base·(1 + |δ|/r)^(−k)·A(δ)", fontsize=12)
    figure.tight_layout(rect=(0, 0, 0.89, 0.96))
    output_path = Path(output_path)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output_path, dpi=dpi)
    plt.close(figure)
    return output_path


def plot_agf(model_dir: str | Path, output_path: str | Path | None = None, max_distance: int = 64) -> Path:
    """Load a saved AGF model from `model_dir` and write its coefficient plot (default `MODEL_DIR/agf_coefficients.png`)."""
    from plldr_hf.loading import load_model

    model = load_model(model_dir, model_type="agf")
    output_path = Path(output_path) if output_path is not None else Path(model_dir) / "agf_coefficients.png"
    return plot_coefficient_curves(model, output_path, max_distance=max_distance)
