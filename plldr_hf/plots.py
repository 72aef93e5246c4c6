"""Plot helpers every family shares: the matplotlib backend and the training curves.

| plot | function | written by |
|---|---|---|
| training / validation loss and DAG terms over steps | `plot_loss_curves` | `train_causal_lm`, `train_translation`, the quickstart |

Each family's own figures live in its folder: `plldr_hf/models/pldrllm/plots.py` (order parameters, singular values
of A) and `plldr_hf/models/agf/plots.py` (the AGF coefficient curves). All figures: 100 dpi, legends outside the
data, labelled axes (units where there are any).
"""

from __future__ import annotations

import os
from pathlib import Path


__all__ = ["loss_curves_skipped", "plot_loss_curves", "pyplot"]

# the series `plot_loss_curves` draws, by log key
LOSS_KEYS = ("loss", "lm_loss", "eval_lm_loss", "eval_loss", "dag_a_lm", "dag_a_p", "dag_g_lm")


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def loss_curves_skipped(log_history: list[dict]) -> str | None:
    """Why `plot_loss_curves` would draw nothing worth looking at (no curve with two logged points), or None."""
    longest = max(sum(1 for entry in log_history if key in entry and "step" in entry) for key in LOSS_KEYS)
    if longest >= 2:
        return None
    steps = max((entry.get("step", 0) for entry in log_history), default=0)
    return f"no loss curve has two points yet ({longest} logged value(s) after {steps} step(s))"


def plot_loss_curves(log_history: list[dict], path: str | os.PathLike, title: str | None = None) -> Path | None:
    """Writes a PNG of the training loss, cross-entropy, validation loss and DAG components against the step.

    Returns None and writes nothing when no curve has two points (`loss_curves_skipped` says why): empty axes or
    lone dots would only look like a broken plot."""
    if loss_curves_skipped(log_history):
        return None
    plt = pyplot()

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
