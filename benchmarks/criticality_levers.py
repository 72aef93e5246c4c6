"""Why a small PLDR-LLM does not collapse: the levers of arXiv 2603.23539, one at a time, at the released metric learner.

The phase-diagram sweep (`benchmarks/criticality.py`) varied peak LR × warm-up on shallow learners and short blocks.
This grid starts from the released 110M model's per-head PLGA (head size 64, 8 residual units of 64→170→64 GLUs,
`A_dff` 170) in a 64-wide, 2-layer, 1-head model, trained on the embedded Shakespeare text with 512-token blocks and
2,048 tokens per step, and moves one lever per cell away from that base:

| lever | cells | what moves |
|---|---|---|
| `base` | seeds 0, 1 | nothing (the reference point; two seeds give the seed-to-seed spread) |
| `lr` | peak LR 3e-4, 3e-3, 1e-2 | the peak learning rate (warm-up 60) |
| `warmup` | 0, 300 steps at peak LR 3e-3 | the warm-up at the higher rate |
| `plga_wd` | 1, 10 | decoupled weight decay on the PLGA tensors P, W, b, a, b_a only (`p ← p − lr·λ·p` after each optimizer step, as AdamW applies its own), beside AdamW's 0.1 on every parameter |
| `dag` | 0.005, 0.05 (all three) | the DAG weights (the papers' scripts use 0.001–0.005 and 0.05) |
| `context` | 128, 1,024 tokens | the block length (the batch keeps 2,048 tokens per step) |
| `depth` | 2, 4 units | the metric learner's residual units |
| `length` | 200, 1,800 steps | the run length, hence the integrated learning rate Σlr |

A second part (`--part 2`), designed after the first showed the peak LR moving G most: peak LR 2e-2 and 3e-2, and at
peak LR 1e-2 (`at_lr_1e-2`) a second seed, 1,800 steps, 1,024-token blocks, 2 units and DAG weights 0.05. A third
(`--part 3`), after the second found a collapse at 1e-2 with 1,024-token blocks: that cell with seed 1, and runs at
1,024 tokens with peak LR 3e-3 (warm-up 60 and 300) and 6e-3, the uncollapsed runs it is compared with.

Every cell records, at the end, the stage statistics of `plldr_hf.models.pldrllm.stages` (relative spread across
inputs of LN(A0), A, W·A, A_LM, A_P, G_LM; the layer of the largest G_LM order parameter) on the default calibration
inputs and on held-out validation blocks of the run's own length (real text), the SOC order parameter with its
numerator and denominator, the validation loss, Σlr, and the stages at every evaluation. `collapse()` accepts a model
on real text exactly when the real-text G_LM order parameter (maximum over layers) is at most 1e-3.

Cells are JSON files under `OUT/cells/`, written atomically as each finishes; a rerun skips them, so the grid can run
in parts (`--only LEVER ...`). `report` writes `criticality_levers.md` / `.json`, `criticality_levers_stages.png`
(relative spread per stage, one line per cell) and `criticality_levers_trajectories.png` (G_LM relative spread
against Σlr). The hypotheses were written before the grid ran: `benchmarks/results/criticality_levers_hypotheses.md`.

    python -m benchmarks.criticality_levers run --out benchmarks/out/levers --jobs 2
    python -m benchmarks.criticality_levers report --out benchmarks/out/levers --results benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks.criticality import _fmt, _read_cell_if_present, load_records, prepare_tokenizer, run_jobs, spearman


# the released model's per-head PLGA (fromthesky/PLDR-LLM-v51-110M-1 config.json) in a model a CPU trains in minutes
BASE_MODEL = {
    "hidden_size": 64,
    "num_attention_heads": 1,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 170,
    "A_dff": 170,
    "num_reslayerA": 8,
    "num_denseA": 2,
}
TOKENS_PER_STEP = 2048
VOCAB = 512
PLGA_TENSORS = ("Wlst", "blst", "pwlst", "alst", "balst")
STAGES = ("gram_ln", "A", "W_A", "A_LM", "A_P", "G_LM")
COLLAPSE_TOLERANCE = 1e-3


@dataclass(frozen=True)
class LeverCell:
    lever: str
    seed: int = 0
    steps: int = 600
    learning_rate: float = 1e-3
    warmup_steps: int = 60
    block_size: int = 512
    num_reslayerA: int = 8
    dag_weights: tuple = (0.0, 0.0, 0.0)
    plga_weight_decay: float = 0.0
    eval_every: int = 100

    @property
    def key(self) -> str:
        moved = {
            name: value
            for name, value in asdict(self).items()
            if name not in ("lever", "eval_every") and value != getattr(BASE, name)
        }
        return "_".join([self.lever] + [f"{k}{v if not isinstance(v, tuple) else v[0]:g}" for k, v in moved.items()])

    @property
    def setting(self) -> str:
        """What this cell moves away from the base, as the table shows it."""
        names = {"learning_rate": "peak LR", "warmup_steps": "warm-up", "plga_weight_decay": "λ_PLGA",
                 "dag_weights": "DAG", "block_size": "tokens", "num_reslayerA": "units", "steps": "steps",
                 "seed": "seed"}  # fmt: skip
        moved = [
            f"{names.get(name, name)} {value[0] if isinstance(value, tuple) else value:g}"
            for name, value in asdict(self).items()
            if name in names and value != getattr(BASE, name)
        ]
        return ", ".join(moved) or "base"


BASE = LeverCell("base")


# the second part, written after the first showed peak LR moving G most (hypotheses Q1-Q6): the LR axis further
# out, and at peak LR 1e-2 each other lever again
HIGH = replace(BASE, lever="at_lr_1e-2", learning_rate=1e-2)


def grid(steps_scale: float = 1.0, part: int | None = None) -> list[LeverCell]:
    second = [
        *(replace(BASE, lever="lr", learning_rate=lr) for lr in (2e-2, 3e-2)),
        replace(HIGH, seed=1),
        replace(HIGH, steps=1800),
        replace(HIGH, block_size=1024),
        replace(HIGH, num_reslayerA=2),
        replace(HIGH, dag_weights=(0.05, 0.05, 0.05)),
    ]
    # the third, after the second found a collapse at 1e-2 with 1,024-token blocks (hypotheses R1-R2): that run
    # with a second seed, and the uncollapsed runs at 1,024 tokens it must be within 3 % of
    third = [
        replace(HIGH, block_size=1024, seed=1),
        replace(BASE, lever="context", block_size=1024, learning_rate=3e-3),
        replace(BASE, lever="context", block_size=1024, learning_rate=3e-3, warmup_steps=300),
        replace(BASE, lever="context", block_size=1024, learning_rate=6e-3),
    ]
    first = [
        BASE,
        replace(BASE, seed=1),
        *(replace(BASE, lever="lr", learning_rate=lr) for lr in (3e-4, 3e-3, 1e-2)),
        *(replace(BASE, lever="warmup", learning_rate=3e-3, warmup_steps=w) for w in (0, 300)),
        *(replace(BASE, lever="plga_wd", plga_weight_decay=wd) for wd in (1.0, 10.0)),
        *(replace(BASE, lever="dag", dag_weights=(w, w, w)) for w in (0.005, 0.05)),
        *(replace(BASE, lever="context", block_size=b) for b in (128, 1024)),
        *(replace(BASE, lever="depth", num_reslayerA=n) for n in (2, 4)),
        *(replace(BASE, lever="length", steps=n) for n in (200, 1800)),
    ]
    cells = {1: first, 2: second, 3: third, None: first + second + third}[part]
    if steps_scale != 1.0:  # a quick pass over the same grid (tests)
        cells = [
            replace(
                c,
                steps=max(2, round(c.steps * steps_scale)),
                warmup_steps=round(c.warmup_steps * steps_scale),
                eval_every=max(1, round(c.eval_every * steps_scale)),
            )
            for c in cells
        ]
    return cells


def plga_weight_decay_callback(weight_decay: float):
    """Decoupled weight decay on the PLGA tensors only: after each optimizer step `p ← p·(1 − lr·λ)` with the
    scheduler's current learning rate, as AdamW decays (its own `weight_decay` still applies to every parameter). The
    callback also integrates the learning rate (`integrated_lr`, Σlr over the steps taken; `by_step`: Σlr after each
    step)."""
    import torch
    from transformers import TrainerCallback

    class PlgaWeightDecay(TrainerCallback):
        integrated_lr = 0.0
        by_step: dict = {}

        def on_step_end(self, args, state, control, model=None, lr_scheduler=None, **kwargs):
            lr = lr_scheduler.get_last_lr()[0]
            self.integrated_lr += lr
            self.by_step[state.global_step] = self.integrated_lr
            if weight_decay:
                with torch.no_grad():
                    for name, parameter in model.named_parameters():
                        if name.rsplit(".", 1)[-1] in PLGA_TENSORS:
                            parameter.mul_(1 - lr * weight_decay)

    return PlgaWeightDecay()


def _stages(measured: dict | None) -> dict | None:
    return None if measured is None else measured.get("stages_of_the_headline_layer")


def run_cell(cell: LeverCell, tokenizer_dir: str, threads: int) -> dict:
    """Train one cell and measure it (module docstring); runs in its own process."""
    import tempfile

    import torch

    from plldr_hf.training.options import TrainOptions
    from plldr_hf.training.run import train

    torch.set_num_threads(threads)
    decay = plga_weight_decay_callback(cell.plga_weight_decay)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="levers-") as tmp:
        recipe = Path(tmp) / "recipe.json"
        recipe.write_text(
            json.dumps({"extends": "tiny", "model": {**BASE_MODEL, "num_reslayerA": cell.num_reslayerA}})
        )
        options = TrainOptions.from_name(
            str(recipe),
            output_dir=str(Path(tmp) / "run"),
            tokenizer=tokenizer_dir,
            max_train_documents=None,
            block_size=cell.block_size,
            per_device_train_batch_size=TOKENS_PER_STEP // cell.block_size,
            max_steps=cell.steps,
            learning_rate=cell.learning_rate,
            warmup_steps=cell.warmup_steps,
            dag_weights=cell.dag_weights,
            seed=cell.seed,
            eval_steps=cell.eval_every,
            logging_steps=cell.eval_every,
            report_to=["none"],
            disable_tqdm=True,
        )
        report = train(options, callbacks=[decay])
        history = json.loads((Path(options.output_dir) / "log_history.json").read_text())
    diagnostics = report.diagnostics or {}
    loss = report.eval_metrics.get("eval_loss")
    real = diagnostics.get("order_parameter_after_real_text")
    default = diagnostics.get("order_parameter_after")
    return {
        "cell": asdict(cell),
        "key": cell.key,
        "threads": threads,
        "validation_loss": loss if loss is not None and math.isfinite(loss) else None,
        "train_blocks": report.train_examples,
        "integrated_lr": decay.integrated_lr,
        "order_parameter_G_LM": {
            "default": None if default is None else default["across_inputs_max_over_layers"]["G_LM"],
            "real_text": None if real is None else real["across_inputs_max_over_layers"]["G_LM"],
        },
        "stages": {"default": _stages(default), "real_text": _stages(real)},
        "before": _stages(diagnostics.get("order_parameter_before")),
        # the stages (default calibration) and the validation loss at every evaluation, with Σlr up to that step
        "trajectory": [
            {**entry, "integrated_lr": decay.by_step.get(entry["step"])}
            for entry in history
            if "stage_relative_G_LM" in entry or ("eval_loss" in entry and "train_runtime" not in entry)
        ],
        "collapse_on_real_text": real is not None
        and real["across_inputs_max_over_layers"]["G_LM"] is not None
        and real["across_inputs_max_over_layers"]["G_LM"] <= COLLAPSE_TOLERANCE,
        "wall_seconds": time.perf_counter() - start,
    }


def _run_cell_job(job: dict) -> dict:
    return run_cell(_cell(job), job["tokenizer_dir"], job["threads"])


def run(cells: list[LeverCell], out: Path, jobs: int, threads: int) -> list[dict]:
    (out / "cells").mkdir(parents=True, exist_ok=True)
    todo = [c for c in cells if _read_cell_if_present(out / "cells" / f"{c.key}.json") is None]
    print(
        f"{len(cells)} cells, {len(cells) - len(todo)} already done in {out / 'cells'}, {len(todo)} to run", flush=True
    )
    # the grid's tokenizer: VOCAB pieces trained on the whole embedded corpus
    tokenizer = str(prepare_tokenizer("tiny", out, name="levers", vocab_size=VOCAB, max_train_documents=None))
    jobs_list = [{"key": c.key, "cell": asdict(c), "tokenizer_dir": tokenizer, "threads": threads} for c in todo]

    def describe(record: dict) -> str:
        stages = record["stages"]["real_text"] or {}
        return (
            f"validation loss {_fmt(record['validation_loss'], '.4g')}, G_LM relative spread on real text "
            f"{_fmt(stages.get('relative_G_LM'))}, SOC {_fmt(record['order_parameter_G_LM']['real_text'])}"
        )

    return run_jobs(jobs_list, _run_cell_job, out, jobs, describe)


def _cell(record: dict) -> LeverCell:
    return LeverCell(**{**record["cell"], "dag_weights": tuple(record["cell"]["dag_weights"])})


def _stage(record: dict, calibration: str, name: str):
    return (record["stages"][calibration] or {}).get(f"relative_{name}")


def _factor(record: dict, calibration: str, before: str, after: str):
    a, b = _stage(record, calibration, after), _stage(record, calibration, before)
    return None if a is None or not b else a / b


def summarize(records: list[dict]) -> dict:
    """The numbers the verdicts quote: per cell the stage factors on real text, and across cells whether the SOC
    headline follows G's relative spread (the mechanism) or its denominator |mean G|."""
    finite = [r for r in records if r["validation_loss"] is not None and r["stages"]["real_text"]]
    base = [r for r in finite if r["cell"]["lever"] == "base"]
    soc = [r["order_parameter_G_LM"]["real_text"] for r in finite]
    spread = [_stage(r, "real_text", "G_LM") for r in finite]
    inverse_mean = [1 / max(r["stages"]["real_text"]["G_LM_soc_denominator_abs_mean"], 1e-30) for r in finite]
    return {
        "cells": len(records),
        "collapsed_on_real_text": [r["key"] for r in records if r["collapse_on_real_text"]],
        "best_validation_loss": min((r["validation_loss"] for r in finite), default=None),
        "base_validation_loss": [r["validation_loss"] for r in base],
        "contraction_factor_range": [
            min((f for r in finite if (f := _factor(r, "real_text", "gram_ln", "A")) is not None), default=None),
            max((f for r in finite if (f := _factor(r, "real_text", "gram_ln", "A")) is not None), default=None),
        ],
        "spearman_soc_vs_relative_spread_G": spearman(soc, spread) if len(finite) > 2 else None,
        "spearman_soc_vs_inverse_abs_mean_G": spearman(soc, inverse_mean) if len(finite) > 2 else None,
    }


def markdown(records: list[dict], summary: dict, meta: dict) -> str:
    lines = [
        "# Levers of collapse at the released metric learner",
        "",
        f"{len(records)} runs (`python -m benchmarks.criticality_levers`, module docstring for the grid); "
        f"{meta.get('threads', 1)} torch thread(s) per run, {meta.get('jobs', 1)} run(s) at a time on "
        f"{meta.get('machine', 'this machine')}; CPU time spent: {meta['sum_minutes']:.0f} min of run wall time × "
        f"{meta.get('threads', 1)} thread(s). Relative spread = RMS(x − mean over inputs) / RMS(x) of each stage's "
        "tensor across the calibration inputs, in the layer of the largest G_LM order parameter; factor = after / "
        "before (below 1: the stage contracts). Real text: up to 8 held-out validation blocks of the run's length. "
        f"`collapse()` accepts at SOC ≤ {COLLAPSE_TOLERANCE:g}.",
        "",
        f"- collapsed on real text: {', '.join(summary['collapsed_on_real_text']) or 'none'}",
        f"- contraction factor LN(A0) → A on real text, over all cells: "
        f"{_fmt(summary['contraction_factor_range'][0])} … {_fmt(summary['contraction_factor_range'][1])}",
        f"- Spearman ρ across cells of the SOC headline (real text) with G_LM's relative spread: "
        f"{_fmt(summary['spearman_soc_vs_relative_spread_G'], '.2f')}; with 1/|mean G|: "
        f"{_fmt(summary['spearman_soc_vs_inverse_abs_mean_G'], '.2f')}",
        "",
        "| lever | setting | Σlr | val loss | LN(A0) | A | A_LM | A_P | G_LM | LN(A0)→A | A_LM→A_P "
        "| SOC G (real text) = RMSE / abs(mean) | SOC G (default calibration) | LN(A0) default | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {
        lever: i for i, lever in enumerate(("base", "lr", "warmup", "plga_wd", "dag", "context", "depth", "length"))
    }
    for r in sorted(records, key=lambda r: (order.get(r["cell"]["lever"], 99), r["key"])):
        real = r["stages"]["real_text"] or {}
        lines.append(
            f"| {r['cell']['lever']} | {_cell(r).setting} | {r['integrated_lr']:.3g} | {_fmt(r['validation_loss'], '.4g')} | "
            + " | ".join(_fmt(_stage(r, "real_text", name)) for name in ("gram_ln", "A", "A_LM", "A_P", "G_LM"))
            + f" | {_fmt(_factor(r, 'real_text', 'gram_ln', 'A'))} | {_fmt(_factor(r, 'real_text', 'A_LM', 'A_P'))} "
            f"| {_fmt(r['order_parameter_G_LM']['real_text'])} = {_fmt(real.get('G_LM_soc_numerator_rmse'))} / "
            f"{_fmt(real.get('G_LM_soc_denominator_abs_mean'))} | {_fmt(r['order_parameter_G_LM']['default'])} "
            f"| {_fmt(_stage(r, 'default', 'gram_ln'))} | {r['wall_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(records: list[dict], stages_path: Path, trajectories_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levers = sorted({r["cell"]["lever"] for r in records})
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9, 5))
    for r in records:
        values = [_stage(r, "real_text", name) for name in STAGES]
        values = [math.nan if v is None else v for v in values]
        ax.plot(range(len(STAGES)), values, marker="o", lw=1, alpha=0.75,
                color=cmap(levers.index(r["cell"]["lever"])))  # fmt: skip
    ax.set_xticks(range(len(STAGES)), ["LN(A0)", "A", "W·A", "A_LM", "A_P", "G_LM"])
    ax.set_yscale("log")
    ax.set_xlabel("PLGA stage")
    ax.set_ylabel("relative spread across held-out blocks")
    ax.set_title("Where G stays input-dependent: each cell's stages on real text")
    ax.legend(handles=[plt.Line2D([], [], color=cmap(i), label=lever) for i, lever in enumerate(levers)], fontsize=8)
    fig.tight_layout()
    fig.savefig(stages_path, dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in records:
        points = [p for p in r["trajectory"] if "stage_relative_G_LM" in p and p.get("integrated_lr") is not None]
        color = cmap(levers.index(r["cell"]["lever"]))
        for ax, name in zip(axes, ("gram_ln", "G_LM")):
            ax.plot([p["integrated_lr"] for p in points], [p[f"stage_relative_{name}"] for p in points],
                    color=color, alpha=0.75, lw=1)  # fmt: skip
    for ax, name in zip(axes, ("LN(A0)", "G_LM")):
        ax.set_xlabel("integrated learning rate Σlr")
        ax.set_ylabel(f"relative spread of {name} (default calibration)")
        ax.set_yscale("log")
    axes[0].legend(
        handles=[plt.Line2D([], [], color=cmap(i), label=lever) for i, lever in enumerate(levers)], fontsize=8
    )
    fig.suptitle("Stages over training against Σlr")
    fig.tight_layout()
    fig.savefig(trajectories_path, dpi=120)
    plt.close(fig)


def report(out: Path, results: Path, meta: dict | None = None) -> dict:
    records = load_records(out)
    if not records:
        raise SystemExit(
            f"error: no finished cells in {out / 'cells'}; run `python -m benchmarks.criticality_levers run` first"
        )
    meta = {**(meta or {}), "sum_minutes": sum(r["wall_seconds"] for r in records) / 60}
    meta.setdefault("threads", records[0].get("threads", 1))
    summary = summarize(records)
    results.mkdir(parents=True, exist_ok=True)
    (results / "criticality_levers.md").write_text(markdown(records, summary, meta))
    (results / "criticality_levers.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": records}, indent=1) + "\n"
    )
    plot(records, results / "criticality_levers_stages.png", results / "criticality_levers_trajectories.png")
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.criticality_levers", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=Path("benchmarks/out/levers"), help="cells and the tokenizer")
        p.add_argument("--results", type=Path, default=None, help="table and plots (default: OUT)")
        p.add_argument("--jobs", type=int, default=1, help="cells in parallel processes")
        p.add_argument("--machine", default=None, help="what the report says the runs ran on")
    run_parser = sub.choices["run"]
    levers = sorted({c.lever for c in grid()})
    run_parser.add_argument("--only", nargs="+", choices=levers, help="run only these levers' cells")
    run_parser.add_argument("--part", type=int, choices=(1, 2, 3), help="run only this part of the grid")
    run_parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    run_parser.add_argument("--steps-scale", type=float, default=1.0, help="scale every cell's steps (quick checks)")
    args = parser.parse_args(argv)
    for name in ("out", "results"):
        path = getattr(args, name)
        if path is not None and path.exists() and not path.is_dir():
            parser.error(f"--{name} {path} is a file, not a folder; give a folder")
    for name in ("jobs",) + (("threads",) if args.command == "run" else ()):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.command == "run" and not (args.steps_scale > 0 and math.isfinite(args.steps_scale)):
        parser.error(f"--steps-scale must be a finite positive number, got {args.steps_scale}")
    meta = {"jobs": args.jobs, "machine": args.machine} if args.machine else {"jobs": args.jobs}
    if args.command == "run":
        cells = [c for c in grid(args.steps_scale, args.part) if not args.only or c.lever in args.only]
        run(cells, args.out, args.jobs, args.threads)
    summary = report(args.out, args.results or args.out, meta)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
