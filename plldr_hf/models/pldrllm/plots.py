"""The PLDR-LLM diagnostics as PNGs, and the diagnostics folder `plldr-hf diagnose` writes.

| plot | function |
|---|---|
| order parameter per layer and tensor (bars) | `plot_order_parameters` |
| singular values of the metric tensor A | `plot_singular_values` |
| `diagnostics.json` and both plots | `save_diagnostics` |
| relative spread of each PLGA stage over training | `plot_stages_over_training` |
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from plldr_hf.models.pldrllm.collapse import DEDUCTIVE_TENSORS
from plldr_hf.models.pldrllm.diagnostics import DiagnosticsReport
from plldr_hf.plots import pyplot


__all__ = ["plot_order_parameters", "plot_singular_values", "plot_stages_over_training", "save_diagnostics"]


def plot_stages_over_training(log_history: list[dict], path) -> Path | None:
    """The relative spread across the calibration inputs of LN(A0), A, W·A, A_LM, A_P and G_LM at each evaluation
    (the `stage_relative_*` entries `OrderParameterCallback` logs, for the layer of the largest G_LM order parameter),
    with G_LM's SOC order parameter on a second axis; None when fewer than two evaluations logged them."""
    from plldr_hf.models.pldrllm.stages import CHAIN, LABELS

    entries = [entry for entry in log_history if "stage_relative_G_LM" in entry]
    if len(entries) < 2:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    steps = [entry["step"] for entry in entries]
    for name in CHAIN:
        values = [entry.get(f"stage_relative_{name}") for entry in entries]
        if all(value is not None for value in values):
            ax.plot(steps, values, marker="o", label=LABELS[name])
    ax.set_xlabel("training step")
    ax.set_ylabel("relative spread across inputs (RMS of x - mean / RMS of x)")
    soc = ax.twinx()
    soc.plot(steps, [entry["order_parameter_G_LM"] for entry in entries], "k--", label="G_LM SOC order parameter")
    soc.set_ylabel("G_LM SOC order parameter (max over layers)")
    handles = ax.get_legend_handles_labels()[0] + soc.get_legend_handles_labels()[0]
    fig.legend(handles, [h.get_label() for h in handles], loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    ax.set_title("Where G stays input-dependent: each PLGA stage over training")
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def save_diagnostics(report: DiagnosticsReport, output_dir) -> dict[str, Path]:
    """Write `diagnostics.json`, `order_parameter.png` and `singular_values_A.png` into `output_dir`."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": output_dir / "diagnostics.json",
        "order_parameter": output_dir / "order_parameter.png",
        "singular_values": output_dir / "singular_values_A.png",
    }
    report.to_json(paths["json"])
    plot_order_parameters(report, paths["order_parameter"])
    plot_singular_values(report, paths["singular_values"])
    return paths


def plot_order_parameters(report: DiagnosticsReport, path) -> None:
    """PNG: how input-dependent each deductive tensor is, per layer — grouped bars of the SOC order parameter across
    the calibration inputs (the collapse criterion, left) and between each prompt and its greedy continuation
    (right). A symmetric-log axis shows an exact 0 (input-invariant) as a bar of height 0."""
    plt = pyplot()
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
    plt = pyplot()
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
