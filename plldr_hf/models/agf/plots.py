"""The AGF coefficient curves as a PNG, and how far training moved them.

One panel per AGF module (a layer's encoder self-, decoder self- or cross-attention, or one per stack when the
parameters are shared), one line per head, over the signed distance δ = query position − key position; they are
LC1·LC2 from `AgfPreTrainedModel.coefficient_curves` (LC3 is a per-feature weight without a distance and is not
drawn). `coefficient_change` says how far training moved them. 100 dpi, legend outside the data, labelled axes.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from plldr_hf.plots import pyplot


__all__ = ["coefficient_change", "panel_title", "plot_coefficient_curves"]


def panel_title(name: str) -> str:
    """A readable panel title for a coefficient's parameter name."""
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
    return {"max_abs_log_change": best[0], "module": panel_title(best[1]), "head": best[2]}


def plot_coefficient_curves(model, output_path: str | Path, max_distance: int = 64, dpi: int = 100) -> Path:
    """Draw `model.coefficient_curves(max_distance)` into a PNG at `output_path`, each head's initial curve dashed
    in the same colour; returns the path.

    Raises:
        ValueError: the model has no AGF coefficient (`position_encoding` other than `"agf"`, or LC1 and LC2 off).
    """
    plt = pyplot()
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
        axis.set_title(panel_title(name), fontsize=9)
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
