"""The order parameter's phase diagram: a grid of peak learning rate × warm-up steps × seeds for small PLDR-LLMs.

arXiv 2603.23539 (and "Power law graph attention: exact generalization of scaled dot-product attention, empirical
collapse at inference") report that training near criticality, set by the peak learning rate and the number of
warm-up steps, drives the order parameter of the deductive outputs towards zero: G_LM becomes input-invariant, the
generator A becomes numerically rank one, and a smaller order parameter goes with better benchmark scores. This
sweep looks for that regime in models a CPU can train in minutes.

Each cell of the grid (size, learning rate, warm-up, seed) trains one model on the embedded Shakespeare corpus with
`plldr_hf.training.run.train` (the tokenizer of the size is trained once and shared by every cell of that size) and records:

| record key | what |
|---|---|
| `trajectory` | at every evaluation: step, validation loss, order parameters of G_LM and A_LM (max over layers and per layer) |
| `validation_loss`, `validation_perplexity` | at the end |
| `order_parameter` | G_LM / A_LM at the end, SOC RMSE/|mean| across the calibration inputs, max over layers (the collapse criterion) |
| `rank_one` | the rank-one audit of A at the end: σ₂/σ₁, numerical rank, identical rows (per layer) |
| `collapse` | whether `collapse()` accepts the model (tolerance 1e-3 on G_LM); if so the scoring speed-up and max abs logit change |

Cells run in parallel processes (`--jobs`), each with a fixed thread count (`--threads`), and each finished cell is
a JSON file under `OUT/cells/`: rerunning the command reuses it. `report` (also run at the end of `run`) writes
`criticality.md` (table, Spearman's ρ between the final order parameter and validation loss with a bootstrap
interval), `criticality.json`, `criticality_phase.png` (the final order parameter over the grid, one panel per size)
and `criticality_trajectories.png` (order parameter against step, coloured by learning rate).

    python -m benchmarks.criticality run --out benchmarks/out/criticality --jobs 2
    python -m benchmarks.criticality report --out benchmarks/out/criticality --results benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path


# from clearly too small (1e-4) to 100× the presets' own rate (1e-3); gradients are clipped by value at 1.0 (the
# reference recipe), which keeps even 0.1 from diverging outright
LEARNING_RATES = (1e-4, 4e-4, 1.5e-3, 6e-3, 2.4e-2, 1e-1)
WARMUPS = (0, 15, 60, 150)
SEEDS = (0, 1)
SIZES = ("tiny", "mini")
STEPS = {"tiny": 400, "mini": 300}
EVAL_EVERY = 50
COLLAPSE_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Cell:
    size: str
    learning_rate: float
    warmup_steps: int
    seed: int
    steps: int
    eval_every: int

    @property
    def key(self) -> str:
        return f"{self.size}_lr{self.learning_rate:g}_w{self.warmup_steps}_s{self.seed}_n{self.steps}"


def grid(sizes, learning_rates, warmups, seeds, steps: dict, eval_every: int) -> list[Cell]:
    return [
        Cell(size, lr, warmup, seed, steps[size], eval_every)
        for size in sizes
        for lr in learning_rates
        for warmup in warmups
        for seed in seeds
    ]


# the order parameters of a run whose deductive outputs are not finite
_NO_ORDER = {name: {"max_over_layers": None, "per_layer": None} for name in ("G_LM", "A_LM")}


def _order(report) -> dict:
    """G_LM and A_LM order parameters across the calibration inputs (max over layers, per layer)."""
    return {
        name: {
            "max_over_layers": report.order_parameter_inputs[name],
            "per_layer": report.order_parameter_inputs_per_layer[name],
        }
        for name in ("G_LM", "A_LM")
    }


def prepare_tokenizer(size: str, out: Path, name: str | None = None, **overrides) -> Path:
    """The tokenizer of the recipe `size` (with `overrides` of its run options), trained once on the embedded corpus
    (seed 0) into `OUT/tokenizers/NAME` (NAME: `size`) and shared by every cell that names it."""
    from plldr_hf.training.causal_lm import language_model_data
    from plldr_hf.training.options import TrainOptions

    folder = out / "tokenizers" / (name or size)
    if not (folder / "tokenizer.json").exists():
        options = TrainOptions.from_name(size, output_dir=str(folder), seed=0, **overrides)
        tokenizer = language_model_data(options).tokenizer
        staging = folder.with_name(folder.name + ".partial")
        tokenizer.save_pretrained(staging)
        staging.rename(folder)
    return folder


def run_cell(cell: Cell, tokenizer_dir: str, threads: int) -> dict:
    """Train one cell and measure it (module docstring); runs in its own process."""
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback

    from plldr_hf.models.pldrllm.diagnostics import diagnose
    from plldr_hf.timing import scoring_speeds
    from plldr_hf.training.options import TrainOptions
    from plldr_hf.training.run import train

    torch.set_num_threads(threads)
    trajectory = []
    # the diagnostics of the latest evaluation: (step, report or None, why not); the last step's are the run's own
    latest = [None]

    def measured(model):
        try:
            return diagnose(model), None
        except ValueError as error:  # diverged: the deductive outputs are not finite
            return None, str(error)

    class Trajectory(TrainerCallback):
        def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
            if trajectory and trajectory[-1]["step"] == state.global_step:
                return  # the final evaluation of a run that just evaluated at its last step
            # the diagnostics run on seeded calibration inputs of their own and leave the training RNG alone
            rng = torch.get_rng_state()
            report, error = measured(model)
            torch.set_rng_state(rng)
            latest[0] = (state.global_step, report, error)
            order = _order(report) if report is not None else _NO_ORDER
            trajectory.append({"step": state.global_step, "validation_loss": metrics.get("eval_loss"), **order})

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="criticality-") as tmp:
        options = TrainOptions.from_name(
            cell.size,
            output_dir=tmp,
            tokenizer=tokenizer_dir,
            max_steps=cell.steps,
            learning_rate=cell.learning_rate,
            warmup_steps=cell.warmup_steps,
            seed=cell.seed,
            eval_steps=cell.eval_every,
            logging_steps=cell.eval_every,
            report_to=["none"],
            disable_tqdm=True,
        )
        report = train(options, callbacks=[Trajectory()])
        train_seconds = time.perf_counter() - start
        model = AutoModelForCausalLM.from_pretrained(tmp).eval()
    loss = report.eval_metrics.get("eval_loss")
    # the trajectory's last point measured the final weights already unless the run ended between evaluations
    final_step, final, diverged = latest[0] if latest[0] is not None else (None, None, None)
    if final_step != cell.steps:
        final, diverged = measured(model)
    finite = final is not None and loss is not None and math.isfinite(loss)
    record = {
        "cell": asdict(cell),
        "key": cell.key,
        "threads": threads,
        "train_seconds": train_seconds,
        "validation_loss": loss if loss is not None and math.isfinite(loss) else None,
        "validation_perplexity": report.scores["validation"]["perplexity"] if finite else None,
        "order_parameter": _order(final) if final is not None else _NO_ORDER,
        "rank_one": {
            "sigma_ratio": final.sigma_ratio if final is not None else [],
            "numerical_rank": final.numerical_rank if final is not None else [],
            "rows_identical": final.rows_identical if final is not None else [],
        },
        "trajectory": trajectory,
        "finite": finite,
        "diverged": diverged,
    }
    collapse = {"accepted": False, "tolerance": COLLAPSE_TOLERANCE}
    if record["finite"]:
        import copy

        collapsed = copy.deepcopy(model)
        try:
            collapse_report = collapsed.collapse(tolerance=COLLAPSE_TOLERANCE)
            collapse["accepted"] = True
        except ValueError as error:
            collapse["refused"] = str(error).splitlines()[0]
            collapse_report = None
        if collapse_report is not None:
            batch = torch.randint(3, model.config.vocab_size, (8, 64), generator=torch.Generator().manual_seed(0))
            speeds = scoring_speeds({"uncollapsed": model, "collapsed": collapsed}, batch)
            collapse.update(
                speedup=speeds["collapsed"] / speeds["uncollapsed"],
                max_abs_logit_diff=collapse_report.max_abs_logit_diff,
            )
    record["collapse"] = collapse
    record["wall_seconds"] = time.perf_counter() - start
    return record


def _run_cell_job(job: dict) -> dict:
    return run_cell(Cell(**job["cell"]), job["tokenizer_dir"], job["threads"])


def _guarded(run_job, job: dict) -> dict:
    """`run_job(job)`, or `{"key", "error"}` when it failed: one failed cell must not stop the others (it is not
    written, so the next run tries it again)."""
    try:
        return run_job(job)
    except Exception as error:  # reported per cell by `run_jobs`
        return {"key": job["key"], "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}


def _write_atomic(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".partial")
    staging.write_text(text)
    os.replace(staging, path)


def _read_cell(path: Path) -> dict | None:
    """A finished cell's record, or None (with a note) when its file cannot be read: `run` retrains that cell."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        print(f"note: {path} cannot be read ({type(error).__name__}); `run` retrains that cell", file=sys.stderr)
        return None
    if not isinstance(record, dict) or "key" not in record:
        print(f"note: {path} is not a cell record; `run` retrains that cell", file=sys.stderr)
        return None
    return record


def _read_cell_if_present(path: Path) -> dict | None:
    return _read_cell(path) if path.exists() else None


def load_records(out: Path) -> list[dict]:
    return [r for r in map(_read_cell, sorted((out / "cells").glob("*.json"))) if r is not None]


def run(cells: list[Cell], out: Path, jobs: int, threads: int) -> list[dict]:
    (out / "cells").mkdir(parents=True, exist_ok=True)
    todo = [cell for cell in cells if _read_cell_if_present(out / "cells" / f"{cell.key}.json") is None]
    print(
        f"{len(cells)} cells, {len(cells) - len(todo)} already done in {out / 'cells'}, {len(todo)} to run", flush=True
    )
    tokenizers = {size: str(prepare_tokenizer(size, out)) for size in sorted({c.size for c in todo})}
    jobs_list = [
        {"key": c.key, "cell": asdict(c), "tokenizer_dir": tokenizers[c.size], "threads": threads} for c in todo
    ]

    def describe(record: dict) -> str:
        collapse = record["collapse"]["accepted"]
        verdict = "accepted" if collapse else "refused" if record["finite"] else "n/a (diverged)"
        return (
            f"validation loss {_fmt(record['validation_loss'], '.4g')}, G_LM order parameter "
            f"{_fmt(record['order_parameter']['G_LM']['max_over_layers'])}, collapse {verdict}"
        )

    return run_jobs(jobs_list, _run_cell_job, out, jobs, describe)


def run_jobs(jobs_list: list[dict], run_job, out: Path, jobs: int, describe) -> list[dict]:
    """Runs `run_job(job)` for each job (`{"key", ...}`, a module-level function: a cell's record) in `jobs` spawned
    processes (a failure becomes `{"key", "error"}`), writes
    each record to `OUT/cells/KEY.json` as it arrives (atomically: a grid stopped midway keeps its finished cells),
    prints a line per cell (`describe(record)`: what it measured) and returns every record under `OUT/cells`. A
    failed cell is reported and not written, so the next run retries it."""
    start = time.perf_counter()
    failed = []

    def done(index: int, record: dict) -> None:
        if "error" in record:
            failed.append(record["key"])
            print(
                f"[{index}/{len(jobs_list)}] {record['key']}: FAILED ({record['error']}); rerun to retry it",
                flush=True,
            )
            return
        _write_atomic(out / "cells" / f"{record['key']}.json", json.dumps(record, indent=1))
        print(
            f"[{index}/{len(jobs_list)}] {record['key']}: {describe(record)} ({record['wall_seconds']:.0f} s; "
            f"{(time.perf_counter() - start) / 60:.1f} min so far)",
            flush=True,
        )

    if jobs > 1 and len(jobs_list) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_guarded, run_job, job) for job in jobs_list]
            for index, future in enumerate(as_completed(futures), 1):
                done(index, future.result())
    else:
        for index, job in enumerate(jobs_list, 1):
            done(index, _guarded(run_job, job))
    if failed:
        print(f"{len(failed)} cell(s) failed: {', '.join(failed)}", file=sys.stderr, flush=True)
    return load_records(out)


def _ranks(values: list[float]) -> list[float]:
    """Ranks 1..n, ties sharing their mean rank (as Spearman's ρ needs)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's ρ: Pearson's correlation of the ranks (None when either side is constant)."""
    rx, ry = _ranks(x), _ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def bootstrap_interval(x, y, samples: int = 2000, level: float = 0.95, seed: int = 0):
    """Percentile bootstrap interval of Spearman's ρ over runs (pairs resampled with replacement)."""
    import random

    rng = random.Random(seed)
    n = len(x)
    values = []
    for _ in range(samples):
        picks = [rng.randrange(n) for _ in range(n)]
        rho = spearman([x[i] for i in picks], [y[i] for i in picks])
        if rho is not None:
            values.append(rho)
    if not values:
        return None
    values.sort()
    low = values[int((1 - level) / 2 * len(values))]
    high = values[min(len(values) - 1, int((1 + level) / 2 * len(values)))]
    return low, high


def _flat(values) -> list:
    """Per-layer (or per-layer, per-head) lists as one flat list."""
    return [x for v in values for x in (_flat(v) if isinstance(v, list) else [v])]


def _fmt(value, spec=".3g") -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def summarize(records: list[dict]) -> dict:
    """Per-size Spearman's ρ (final G_LM order parameter vs validation loss, finite runs) and the closest approach."""
    summary = {}
    for size in sorted({r["cell"]["size"] for r in records}):
        runs = [r for r in records if r["cell"]["size"] == size]
        ok = [r for r in runs if r["finite"] and r["order_parameter"]["G_LM"]["max_over_layers"] is not None]
        op = [r["order_parameter"]["G_LM"]["max_over_layers"] for r in ok]
        loss = [r["validation_loss"] for r in ok]
        closest = min(ok, key=lambda r: r["order_parameter"]["G_LM"]["max_over_layers"], default=None)
        best = min(ok, key=lambda r: r["validation_loss"], default=None)
        summary[size] = {
            "runs": len(runs),
            "finite_runs": len(ok),
            "diverged": [r["key"] for r in runs if not r["finite"]],
            "collapsed": [r["key"] for r in runs if r["collapse"]["accepted"]],
            "spearman_rho": spearman(op, loss) if len(ok) > 2 else None,
            "spearman_interval_95": bootstrap_interval(op, loss) if len(ok) > 2 else None,
            "closest": closest
            and {
                "key": closest["key"],
                "order_parameter": closest["order_parameter"]["G_LM"]["max_over_layers"],
                "validation_loss": closest["validation_loss"],
            },
            "best_loss": best
            and {
                "key": best["key"],
                "order_parameter": best["order_parameter"]["G_LM"]["max_over_layers"],
                "validation_loss": best["validation_loss"],
            },
        }
    return summary


def markdown(records: list[dict], summary: dict, meta: dict) -> str:
    lines = [
        "# Order-parameter phase diagram of small PLDR-LLMs",
        "",
        f"{meta['cells']} runs on the embedded Shakespeare corpus, {meta.get('threads', 1)} thread(s) per run, "
        f"{meta.get('jobs', 1)} run(s) at a time on {meta.get('machine', 'this machine')}; sum of the runs' wall time "
        f"{meta['sum_minutes']:.0f} min. Order parameter: SOC RMSE/|mean| of G_LM across the calibration inputs of "
        f"`collapse()`, maximum over layers (≈ 0: input-invariant; `collapse()` accepts ≤ {COLLAPSE_TOLERANCE:g}). "
        "Written by `python -m benchmarks.criticality`.",
        "",
        "## Summary per size",
        "",
        "| size | runs | diverged | collapsed | smallest final order parameter (run, val loss) | best val loss "
        "(run, order parameter) | Spearman ρ (order parameter, val loss) [95% bootstrap] |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, s in summary.items():
        interval = s["spearman_interval_95"]
        closest, best = s["closest"], s["best_loss"]
        lines.append(
            f"| {size} | {s['runs']} | {len(s['diverged'])} | {len(s['collapsed'])} | "
            + (
                f"{_fmt(closest['order_parameter'])} (`{closest['key']}`, {_fmt(closest['validation_loss'], '.4g')})"
                if closest
                else "n/a"
            )
            + " | "
            + (
                f"{_fmt(best['validation_loss'], '.4g')} (`{best['key']}`, {_fmt(best['order_parameter'])})"
                if best
                else "n/a"
            )
            + f" | {_fmt(s['spearman_rho'], '.2f')}"
            + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")
            + " |"
        )
    lines += [
        "",
        "## Every run",
        "",
        "| size | peak LR | warm-up | seed | val loss | val ppl | G_LM order (max over layers) | A_LM order | "
        "G_LM order at first eval | σ₂/σ₁ of A (max over layers and heads) | A rows identical (all) | collapse() | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        records,
        key=lambda r: (r["cell"]["size"], r["cell"]["learning_rate"], r["cell"]["warmup_steps"], r["cell"]["seed"]),
    ):
        c, op = r["cell"], r["order_parameter"]
        first = r["trajectory"][0]["G_LM"]["max_over_layers"] if r["trajectory"] else None
        collapse = r["collapse"]
        verdict = (
            f"accepted, {collapse['speedup']:.2f}×, Δlogit {collapse['max_abs_logit_diff']:.2g}"
            if collapse["accepted"]
            else "refused"
            if r["finite"]
            else "diverged"
        )
        lines.append(
            f"| {c['size']} | {c['learning_rate']:g} | {c['warmup_steps']} | {c['seed']} | "
            f"{_fmt(r['validation_loss'], '.4g')} | {_fmt(r['validation_perplexity'], '.4g')} | "
            f"{_fmt(op['G_LM']['max_over_layers'])} | {_fmt(op['A_LM']['max_over_layers'])} | {_fmt(first)} | "
            f"{_fmt(max(_flat(r['rank_one']['sigma_ratio']), default=None))} | "
            f"{all(_flat(r['rank_one']['rows_identical'])) if r['finite'] else 'n/a'} | "
            f"{verdict} | "
            f"{r['wall_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(records: list[dict], phase_path: Path, trajectories_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    sizes = sorted({r["cell"]["size"] for r in records})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.2), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        runs = [r for r in records if r["cell"]["size"] == size]
        lrs = sorted({r["cell"]["learning_rate"] for r in runs})
        warmups = sorted({r["cell"]["warmup_steps"] for r in runs})
        grid_values = [[math.nan] * len(lrs) for _ in warmups]
        for i, w in enumerate(warmups):
            for j, lr in enumerate(lrs):
                values = [
                    r["order_parameter"]["G_LM"]["max_over_layers"]
                    for r in runs
                    if r["cell"]["learning_rate"] == lr and r["cell"]["warmup_steps"] == w and r["finite"]
                ]
                values = [v for v in values if v is not None and math.isfinite(v)]
                if values:
                    grid_values[i][j] = statistics.median(values)
        finite = [v for row in grid_values for v in row if math.isfinite(v) and v > 0]
        norm = LogNorm(vmin=min(finite), vmax=max(finite)) if finite else None
        image = ax.imshow(grid_values, origin="lower", aspect="auto", cmap="viridis", norm=norm)
        for i in range(len(warmups)):
            for j in range(len(lrs)):
                value = grid_values[i][j]
                ax.text(
                    j,
                    i,
                    "diverged" if not math.isfinite(value) else f"{value:.2g}",
                    ha="center",
                    va="center",
                    color="black" if not math.isfinite(value) else "white",
                    fontsize=8,
                )
        ax.set_xticks(range(len(lrs)), [f"{lr:g}" for lr in lrs])
        ax.set_yticks(range(len(warmups)), [str(w) for w in warmups])
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("warm-up steps")
        ax.set_title(f"{size}: final G_LM order parameter (median over seeds)")
        fig.colorbar(image, ax=ax, label="order parameter (log scale)")
    fig.tight_layout()
    fig.savefig(phase_path, dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes) + 1.5, 4.2), squeeze=False)
    lrs_all = sorted({r["cell"]["learning_rate"] for r in records})
    cmap = plt.get_cmap("plasma", len(lrs_all) + 1)
    for ax, size in zip(axes[0], sizes):
        for r in records:
            if r["cell"]["size"] != size or not r["trajectory"]:
                continue
            steps = [p["step"] for p in r["trajectory"]]
            values = [math.nan if p["G_LM"]["max_over_layers"] is None else p["G_LM"]["max_over_layers"]
                      for p in r["trajectory"]]  # fmt: skip
            ax.plot(steps, values, color=cmap(lrs_all.index(r["cell"]["learning_rate"])), alpha=0.7, lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("G_LM order parameter (max over layers)")
        ax.set_title(f"{size}: trajectories (all warm-ups and seeds)")
    handles = [plt.Line2D([], [], color=cmap(i), label=f"peak LR {lr:g}") for i, lr in enumerate(lrs_all)]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(trajectories_path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def report(out: Path, results: Path, meta: dict | None = None) -> dict:
    records = load_records(out)
    if not records:
        raise SystemExit(
            f"error: no finished cells in {out / 'cells'}; run `python -m benchmarks.criticality run` first"
        )
    meta = dict(meta or {})
    meta.update(cells=len(records), sum_minutes=sum(r["wall_seconds"] for r in records) / 60)
    meta.setdefault("threads", records[0].get("threads", 1))
    summary = summarize(records)
    results.mkdir(parents=True, exist_ok=True)
    (results / "criticality.md").write_text(markdown(records, summary, meta))
    (results / "criticality.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": records}, indent=1) + "\n"
    )
    plot(records, results / "criticality_phase.png", results / "criticality_trajectories.png")
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.criticality", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=Path("benchmarks/out/criticality"), help="cells and tokenizers")
        p.add_argument("--results", type=Path, default=None, help="table and plots (default: OUT)")
        p.add_argument("--jobs", type=int, default=1, help="cells in parallel processes")
    run_parser = sub.choices["run"]
    run_parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=("tiny", "mini", "small"))
    run_parser.add_argument("--learning-rates", nargs="+", type=float, default=list(LEARNING_RATES))
    run_parser.add_argument("--warmups", nargs="+", type=int, default=list(WARMUPS))
    run_parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    run_parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default: per size)")
    run_parser.add_argument("--eval-every", type=int, default=EVAL_EVERY, help="trajectory points every N steps")
    run_parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    args = parser.parse_args(argv)
    for name in ("out", "results"):
        path = getattr(args, name)
        if path is not None and path.exists() and not path.is_dir():
            parser.error(f"--{name} {path} is a file, not a folder; give a folder")
    for name in ("jobs",) + (("threads", "steps", "eval_every") if args.command == "run" else ()):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    results = args.results or args.out
    meta = {"jobs": args.jobs, "machine": f"{os.cpu_count()} cores"}
    if args.command == "run":
        for lr in args.learning_rates:
            if not (math.isfinite(lr) and lr > 0):
                parser.error(f"--learning-rates: every value must be a positive finite number, got {lr}")
        if any(w < 0 for w in args.warmups):
            parser.error("--warmups: every value must be non-negative")
        steps = {size: args.steps or STEPS.get(size, 300) for size in args.sizes}
        cells = grid(args.sizes, args.learning_rates, args.warmups, args.seeds, steps, args.eval_every)
        run(cells, args.out, args.jobs, args.threads)
        meta["threads"] = args.threads
    summary = report(args.out, results, meta)
    for size, s in summary.items():
        print(
            f"{size}: {s['runs']} runs, {len(s['collapsed'])} collapsed, Spearman ρ {_fmt(s['spearman_rho'], '.2f')}"
        )
    print(f"wrote {results / 'criticality.md'} and the plots beside it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
