"""The AGF paper's position-encoding comparison, rerun side by side under one CPU budget.

Variants of the same encoder–decoder (`plldr_hf.AgfForConditionalGeneration`, only `position_encoding` / `pcmv`
differ): sinusoidal (the paper's "vanilla"), RoPE, ALiBi, T5 relative bias, AGF, AGF + PCM-V (KERPLE-log on request).
Every variant trains for the same number of steps on the same data, tokenizer, batches and recipe, for several
seeds, and is scored on the in-domain LibreOffice test set and the out-of-domain GNOME test set:

- token accuracy: teacher-forced, over every non-pad target token of the whole test set (the paper's "accuracy");
- BLEU and chrF (sacrebleu, signatures in the output): greedy translations of a fixed subset of each test set;
- training step time relative to sinusoidal: median wall time of an optimizer step (forward, backward, update;
  first steps skipped) of each run, divided by the sinusoidal run of the same seed in the same sweep.

Reported as mean ± sample standard deviation over seeds. A difference from sinusoidal counts as resolved only if it
exceeds the 95 % Welch t interval of the difference of means; otherwise it is "within noise".

    python benchmarks/position_ablation.py --quick      # tiny smoke run, < 1 min
    python benchmarks/position_ablation.py --pilot      # times a few steps of each variant, prints the sweep estimate
    python benchmarks/position_ablation.py              # the full sweep (see --pilot for its duration)

The sweep appends one JSON line per finished run to `<output-dir>/runs.jsonl` and skips finished runs when started
again with the same settings, so an interrupted sweep resumes. Results: `<report-dir>/position_ablation.md`
(Markdown table with the paper's numbers), `.png` (chart) and `.json` (summary).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS


VARIANTS = {name: fields for name, (_, fields) in POSITION_VARIANTS.items()}
LABELS = {name: label for name, (label, _) in POSITION_VARIANTS.items()}


# the sweep's default, about 50 min on 2 cores at 2,000 steps: the paper's vanilla baseline, its AGF + PCM-V, and
# the two ways for AGF + PCM-V to align with the source (absolute sinusoids added; a positional prior in
# cross-attention); AGF alone, RoPE, ALiBi, KERPLE-log, T5 and the LC2/LC3 variant with --variants
DEFAULT_VARIANTS = ("sinusoidal", "agf+pcmv", "agf+pcmv+abs", "agf+pcmv+cross")
# the paper's accuracies (%) as given in the project's summary of the paper, WMT17 en→de, 3-layer model (arXiv 2603.04805,
# as summarised for this project: not checked against the paper body, whose full text is not public); it reports no RoPE / ALiBi / KERPLE / T5 numbers
PAPER_ACCURACY = {"sinusoidal": 70.59, "agf": 70.45, "agf+pcmv": 70.73}
PAPER_EXTRA = ("AGF-M + SCO + PCM-V", 70.92)
REFERENCE = "sinusoidal"

# two-sided 95 % Student t critical values, df = 1..30 (df > 30: 2.0)
T_CRIT = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
          2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
          2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]  # fmt: skip


@dataclass(frozen=True)
class Budget:
    """Everything that defines a sweep; runs recorded under another budget are not reused."""

    d_model: int = 128
    layers: int = 3
    heads: int = 4
    ffn_dim: int = 512
    dropout: float = 0.1
    vocab_size: int = 4000
    max_length: int = 64
    train_samples: int | None = None
    steps: int = 2000
    warmup_steps: int = 200
    learning_rate: float = 2e-3
    scheduler: str = "inverse_sqrt"
    batch_size: int = 32
    label_smoothing: float = 0.1
    test_samples: int | None = None
    bleu_samples: int = 300
    generation_length: int = 80
    seeds: tuple[int, ...] = (0, 1, 2)
    threads: int = 1

    def key(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]

    def data_key(self) -> str:
        fields = ("vocab_size", "max_length", "train_samples", "test_samples", "bleu_samples")
        return hashlib.sha1(json.dumps([getattr(self, f) for f in fields]).encode()).hexdigest()[:12]


FULL = Budget()
QUICK = Budget(
    d_model=32,
    layers=2,
    ffn_dim=64,
    vocab_size=300,
    max_length=32,
    train_samples=1000,
    steps=8,
    warmup_steps=2,
    learning_rate=3e-3,
    batch_size=16,
    test_samples=48,
    bleu_samples=16,
    generation_length=24,
    seeds=(0, 1),
)


def _mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def welch_interval(a: list[float], b: list[float]) -> tuple[float, float] | None:
    """mean(a) − mean(b) and the half-width of its 95 % Welch t interval; None with fewer than 2 values each."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0:
        return diff, 0.0
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = T_CRIT[max(1, int(df)) - 1] if df < 31 else 2.0
    return diff, t * math.sqrt(va + vb)


def welch_resolved(a: list[float], b: list[float]) -> bool | None:
    """True if mean(a) − mean(b) lies outside the 95 % Welch t interval; None with fewer than 2 values each."""
    interval = welch_interval(a, b)
    if interval is None:
        return None
    diff, half = interval
    return abs(diff) > half if half > 0 else diff != 0


def _by_length(ds):
    """Sorted by source length: evaluation batches then hold similar lengths (less padding, earlier stop)."""
    order = sorted(range(len(ds)), key=lambda i: len(ds[i]["translation"]["en"]))
    return ds.select(order)


def prepare_data(budget: Budget, cache_dir: Path):
    """One tokenizer and one tokenised copy of the data for every run; saved so parallel workers can load it."""
    from datasets import DatasetDict, load_from_disk
    from transformers import AutoTokenizer

    from plldr_hf.training.corpus import load_translation_dataset, take_subset
    from plldr_hf.training.preprocessing import preprocess_translation
    from plldr_hf.training.tokenizers import train_joint_tokenizer

    folder = cache_dir / f"data-{budget.data_key()}"
    if (folder / "done").is_file():
        return (
            AutoTokenizer.from_pretrained(folder / "tokenizer"),
            load_from_disk(str(folder / "raw")),
            load_from_disk(str(folder / "tokenized")),
        )
    raw = load_translation_dataset("libreoffice")
    raw["train"] = take_subset(raw["train"], budget.train_samples)
    for split in ("test", "gnome"):
        raw[split] = _by_length(take_subset(raw[split], budget.test_samples))
        raw[f"{split}_bleu"] = _by_length(take_subset(raw[split], budget.bleu_samples))
    del raw["validation"]
    tokenizer = train_joint_tokenizer(raw["train"], budget.vocab_size)
    # train on pairs that fit max_length whole (no truncated targets); score the test sets truncated at 128
    tests = DatasetDict({split: data for split, data in raw.items() if split != "train"})
    tokenized = preprocess_translation(
        tests, tokenizer, max_source_length=2 * budget.max_length, max_target_length=128
    )
    limit = budget.max_length
    tokenized["train"] = preprocess_translation(
        raw["train"], tokenizer, max_source_length=limit, max_target_length=limit, drop_long=True
    )
    print(f"training pairs: {len(tokenized['train'])} of {len(raw['train'])} fit {limit} subwords", flush=True)
    tokenizer.save_pretrained(folder / "tokenizer")
    raw.save_to_disk(str(folder / "raw"))
    tokenized.save_to_disk(str(folder / "tokenized"))
    (folder / "done").write_text("ok\n")
    return tokenizer, raw, tokenized


# `evaluate_translation` settings of every score: test sources up to 128 subwords, references truncated at 128
EVAL_SETTINGS = dict(max_source_length=128, max_target_length=128, batch_size=64, disable_tqdm=True)


def score(model, tokenizer, raw, tokenized, budget: Budget) -> dict:
    """The ablation's scores of a model on both test sets: full teacher-forced accuracy and source gap, greedy BLEU
    and chrF of the fixed subset; plus the seconds it took."""
    from plldr_hf.training.translation_trainer import evaluate_translation

    start = time.perf_counter()
    scores = {}
    for split in ("test", "gnome"):
        full = evaluate_translation(
            model, tokenizer, raw[split], tokenized=tokenized[split], generate=False, desc=split, **EVAL_SETTINGS
        )
        bleu = evaluate_translation(
            model,
            tokenizer,
            raw[f"{split}_bleu"],
            tokenized=tokenized[f"{split}_bleu"],
            num_beams=1,
            max_length=budget.generation_length,
            desc=split,
            **EVAL_SETTINGS,
        )
        scores[split] = {
            "accuracy": 100 * full["accuracy"],
            # accuracy points lost when each target gets another segment's source: does the decoder use the source?
            "source_gap": None if full["source_gap"] is None else 100 * full["source_gap"],
            "loss": full["loss"],
            "target_tokens": full["target_tokens"],
            "bleu": bleu["bleu"],
            "chrf": bleu["chrf"],
            "bleu_segments": bleu["segments"],
            "bleu_signature": bleu["bleu_signature"],
            "chrf_signature": bleu["chrf_signature"],
        }
    scores["eval_seconds"] = time.perf_counter() - start
    return scores


def curve_point(model, tokenizer, raw, tokenized) -> dict:
    """Teacher-forced accuracy and source gap (%) on the in-domain BLEU subset: a cheap point of a training curve."""
    from plldr_hf.training.translation_trainer import evaluate_translation

    full = evaluate_translation(
        model,
        tokenizer,
        raw["test_bleu"],
        tokenized=tokenized["test_bleu"],
        generate=False,
        desc="curve",
        **EVAL_SETTINGS,
    )
    return {"accuracy": 100 * full["accuracy"], "source_gap": 100 * full["source_gap"], "loss": full["loss"]}


def _score_at_callback(actions: dict):
    """A `TrainerCallback` that runs `actions[step](step, model)` after that optimizer step without changing the
    course of training: evaluation builds a Trainer, which reseeds every RNG, so the torch, Python and NumPy states are
    saved and restored around it, and the model goes back to training mode. Its time falls outside the step timer."""
    import random

    import numpy as np
    import torch
    from transformers import TrainerCallback

    class ScoreAt(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            action = actions.get(state.global_step)
            if action is None:
                return
            python_state, numpy_state = random.getstate(), np.random.get_state()
            with torch.random.fork_rng(devices=[]):
                model.eval()
                action(state.global_step, model)
                model.train()
            random.setstate(python_state)
            np.random.set_state(numpy_state)

    return ScoreAt()


def run_one(
    variant: str,
    seed: int,
    budget: Budget,
    cache_dir: Path,
    *,
    evaluate: bool = True,
    steps=None,
    curve_every: int | None = None,
) -> dict:
    """Trains one (variant, seed) and scores it; returns a JSON-serialisable record.

    `steps` beyond the budget's make a long run: the record then also holds `at_budget`, the full record of the
    same run scored at the budget's step count (the inverse-sqrt schedule does not depend on the total, so the first
    `budget.steps` steps are those of a budget-length run), and with `curve_every` a `curve` of `curve_point`s.
    """
    import torch
    from transformers import DataCollatorForSeq2Seq, set_seed

    from plldr_hf import AgfForConditionalGeneration
    from plldr_hf.training.callbacks import StepTimerCallback
    from plldr_hf.training.options import TranslationOptions
    from plldr_hf.training.recipes import agf_config
    from plldr_hf.training.tokenizers import translation_token_fields
    from plldr_hf.training.translation_trainer import TranslationTrainer

    torch.set_num_threads(budget.threads)
    tokenizer, raw, tokenized = prepare_data(budget, cache_dir)
    set_seed(seed)
    config = agf_config(
        "small",
        label_smoothing=budget.label_smoothing,
        d_model=budget.d_model,
        encoder_layers=budget.layers,
        decoder_layers=budget.layers,
        encoder_attention_heads=budget.heads,
        decoder_attention_heads=budget.heads,
        encoder_ffn_dim=budget.ffn_dim,
        decoder_ffn_dim=budget.ffn_dim,
        dropout=budget.dropout,
        **VARIANTS[variant],
    )
    config.update(translation_token_fields(tokenizer))
    model = AgfForConditionalGeneration(config)
    total_steps = steps or budget.steps
    run_dir = cache_dir / "runs" / f"{variant}-seed{seed}"
    args = TranslationOptions(
        output_dir=str(run_dir),
        max_steps=total_steps,
        warmup_steps=budget.warmup_steps,
        learning_rate=budget.learning_rate,
        lr_scheduler_type=budget.scheduler,
        per_device_train_batch_size=budget.batch_size,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=max(1, budget.steps // 5),
        report_to=["none"],
        use_cpu=True,
        seed=seed,
        disable_tqdm=not sys.stderr.isatty(),
    )
    timer = StepTimerCallback()
    start = time.perf_counter()
    trainer = None
    record = {"variant": variant, "seed": seed, "budget": budget.key(), "parameters": model.num_parameters()}
    curve = []
    actions = {}

    def timing(upto: int) -> dict:
        skip = min(5, upto // 2)
        losses = [h for h in trainer.state.log_history if "loss" in h and h.get("step", 0) <= upto]
        return {
            "final_loss": losses[-1]["loss"] if losses else None,
            "step_time": statistics.median(timer.step_times[skip:upto]),
            "step_cpu_time": statistics.median(timer.cpu_times[skip:upto]),
            "train_seconds": time.perf_counter() - start,
        }

    if curve_every:
        for step in range(curve_every, total_steps + 1, curve_every):
            actions[step] = lambda step, model: curve.append(
                {"step": step, **curve_point(model, tokenizer, raw, tokenized)}
            )
    if evaluate and total_steps > budget.steps:
        at_curve = actions.get(budget.steps)

        def at_budget(step, model):
            record["at_budget"] = {
                **record,
                "train_loss": None,
                **timing(step),
                **score(model, tokenizer, raw, tokenized, budget),
            }
            if at_curve is not None:
                at_curve(step, model)

        actions[budget.steps] = at_budget
    trainer = TranslationTrainer(
        model=model,
        args=args,
        train_dataset=tokenized["train"],
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        callbacks=[timer, _score_at_callback(actions)],
        # similar lengths per batch, batches in random order; transformers' group_by_length serves each mega-batch
        # longest to shortest, which left every variant emitting one frequent word (the 1,000-step table of before)
        bucket_by_length=True,
    )
    output = trainer.train()
    if "at_budget" in record:
        # the callback ran before the Trainer logged that step's loss
        record["at_budget"]["final_loss"] = timing(budget.steps)["final_loss"]
    record.update(train_loss=output.training_loss, **timing(total_steps), steps=total_steps)
    if curve:
        record["curve"] = curve
    if not evaluate:
        return record
    scores = score(model, tokenizer, raw, tokenized, budget)
    record["eval_seconds"] = scores.pop("eval_seconds")
    record.update(scores)
    return record


def _run_job(job: dict) -> dict:
    return run_one(**job)


LONG_VARIANTS = ("sinusoidal", "agf+pcmv")


def long_report(records: list[dict], budget: Budget, report: Path) -> str:
    """Markdown and PNG of the long runs: accuracy and source gap over the steps, and the final scores."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for record in records:
        steps = [p["step"] for p in record["curve"]]
        for ax, key in zip(axes, ("source_gap", "accuracy")):
            ax.plot(
                steps, [p[key] for p in record["curve"]], marker="o", markersize=3, label=LABELS[record["variant"]]
            )
    axes[0].set_ylabel("source gap (accuracy points, true − wrong source)")
    axes[1].set_ylabel("teacher-forced accuracy (%)")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.axvline(budget.steps, color="tab:gray", linewidth=0.8, linestyle="--")
        ax.grid(alpha=0.3)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=9)
    fig.suptitle(
        f"Long runs, seed {records[0]['seed']}: does the decoder learn to use the source? "
        f"(in-domain {budget.bleu_samples}-segment subset; dashed: the ablation's {budget.steps} steps)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(report / "position_ablation_long.png", dpi=110)
    plt.close(fig)

    steps = sorted({p["step"] for r in records for p in r["curve"]})
    points = {r["variant"]: {p["step"]: p for p in r["curve"]} for r in records}
    names = [LABELS[r["variant"]] for r in records]
    lines = [
        f"# Long runs: {records[0]['steps']} steps, seed {records[0]['seed']}",
        "",
        "Teacher-forced accuracy and source gap (accuracy with the true source minus with another segment's source) "
        f"on the {budget.bleu_samples}-segment in-domain subset, during training:",
        "",
        "| step | " + " | ".join(f"{n} acc. | {n} gap" for n in names) + " |",
        "|---|" + "---|---|" * len(records),
    ]
    for step in steps:
        cells = []
        for record in records:
            point = points[record["variant"]].get(step)
            cells += ["n/a", "n/a"] if point is None else [f"{point['accuracy']:.2f}", f"{point['source_gap']:.2f}"]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Final scores after {records[0]['steps']} steps (full test sets; BLEU / chrF greedy on the fixed subsets):",
        "",
        "| variant | in-domain acc. | in-domain gap | in-domain BLEU | in-domain chrF | GNOME acc. | GNOME BLEU | train min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for record in records:
        t, g = record["test"], record["gnome"]
        lines.append(
            f"| {LABELS[record['variant']]} | {t['accuracy']:.2f} | {t['source_gap']:.2f} | {t['bleu']:.2f} | "
            f"{t['chrf']:.2f} | {g['accuracy']:.2f} | {g['bleu']:.2f} | {record['train_seconds'] / 60:.0f} |"
        )
    lines += [
        "",
        f"Same budget as the ablation otherwise (its setup line); the step-{budget.steps} scores of these runs are the "
        f"seed-{records[0]['seed']} rows of the ablation table. Plot: `position_ablation_long.png`.",
    ]
    text = "\n".join(lines) + "\n"
    (report / "position_ablation_long.md").write_text(text, encoding="utf-8")
    return text


def summarize(records: list[dict], variants: list[str]) -> dict:
    """Per variant: mean ± std of every metric and of the step-time ratio to the reference, plus noise verdicts."""
    by_variant = {v: [r for r in records if r["variant"] == v] for v in variants}
    summary = {}
    for variant, runs in by_variant.items():
        if not runs:
            continue
        entry = {"seeds": sorted(r["seed"] for r in runs), "parameters": runs[0]["parameters"]}
        for split in ("test", "gnome"):
            for metric in ("accuracy", "bleu", "chrf", "source_gap"):
                # runs recorded before the source gap existed have none
                values = [r[split][metric] for r in runs if r[split].get(metric) is not None]
                mean, std = _mean_std(values)
                ref = [r[split][metric] for r in by_variant.get(REFERENCE, []) if r[split].get(metric) is not None]
                entry[f"{split}_{metric}"] = {
                    "mean": mean,
                    "std": std,
                    "values": values,
                    "resolved_vs_reference": None if variant == REFERENCE else welch_resolved(values, ref),
                    "welch_vs_reference": None if variant == REFERENCE else welch_interval(values, ref),
                }
        for key in ("step_time", "step_cpu_time"):
            ref_time = {r["seed"]: r[key] for r in by_variant.get(REFERENCE, [])}
            ratios = [r[key] / ref_time[r["seed"]] for r in runs if r["seed"] in ref_time]
            mean, std = _mean_std(ratios)
            entry[f"{key}_ratio"] = {"mean": mean, "std": std, "values": ratios}
            entry[f"{key}_ms"] = _mean_std([1000 * r[key] for r in runs])[0]
        summary[variant] = entry
    return summary


def _pm(stat, scale=1.0, digits=2) -> str:
    if stat is None or stat["mean"] is None:
        return "n/a"
    mark = "" if stat.get("resolved_vs_reference") in (None, False) else " *"
    if len(stat.get("values", ())) == 1:
        return f"{scale * stat['mean']:.{digits}f} (1 seed)"
    return f"{scale * stat['mean']:.{digits}f} ± {scale * stat['std']:.{digits}f}{mark}"


def markdown_table(summary: dict, budget: Budget, meta: dict) -> str:
    head = (
        "| variant | paper acc. (WMT17) [S] | params | in-domain acc. | in-domain BLEU | in-domain chrF "
        "| GNOME acc. | GNOME BLEU | GNOME chrF | in-domain source gap (acc. points) | step time vs sinusoidal (wall) "
        "| (CPU) |"
    )
    lines = [head, "|" + "---|" * 12]
    for variant, entry in summary.items():
        paper = PAPER_ACCURACY.get(variant)
        lines.append(
            f"| {LABELS[variant]} | {'—' if paper is None else f'{paper:.2f}'} | {entry['parameters'] / 1e6:.2f}M "
            f"| {_pm(entry['test_accuracy'])} | {_pm(entry['test_bleu'])} | {_pm(entry['test_chrf'])} "
            f"| {_pm(entry['gnome_accuracy'])} | {_pm(entry['gnome_bleu'])} | {_pm(entry['gnome_chrf'])} "
            f"| {_pm(entry['test_source_gap'])} "
            f"| {_pm(entry['step_time_ratio'])}× | {_pm(entry['step_cpu_time_ratio'])}× |"
        )
    lines.append(f"| {PAPER_EXTRA[0]} | {PAPER_EXTRA[1]:.2f} | | not reproducible: AGF-M and SCO are undefined | "
                 "| | | | | | | |")  # fmt: skip
    verdicts = []
    for metric, name in (("test_accuracy", "in-domain accuracy"), ("gnome_accuracy", "GNOME accuracy"),
                         ("test_bleu", "in-domain BLEU"), ("gnome_bleu", "GNOME BLEU")):  # fmt: skip
        resolved = [LABELS[v] for v, e in summary.items() if e[metric]["resolved_vs_reference"]]
        noise = [LABELS[v] for v, e in summary.items() if e[metric]["resolved_vs_reference"] is False]
        verdicts.append(
            f"- {name}: differing from sinusoidal beyond noise: {', '.join(resolved) or 'none'}; "
            f"within noise: {', '.join(noise) or 'none'}."
        )
    metrics = [("test_bleu", "in-domain BLEU"), ("test_chrf", "in-domain chrF"), ("test_accuracy", "in-domain acc."),
               ("test_source_gap", "in-domain source gap"), ("gnome_bleu", "GNOME BLEU"), ("gnome_chrf", "GNOME chrF"),
               ("gnome_accuracy", "GNOME acc."), ("gnome_source_gap", "GNOME source gap")]  # fmt: skip
    welch = [
        "",
        "Difference from sinusoidal, mean ± half-width of the 95 % Welch t interval (`*`: the interval excludes 0):",
        "",
        "| variant | " + " | ".join(name for _, name in metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for variant, entry in summary.items():
        if variant == REFERENCE:
            continue
        cells = []
        for key, _ in metrics:
            interval = entry[key]["welch_vs_reference"]
            if interval is None:
                cells.append("n/a")
            else:
                diff, half = interval
                cells.append(f"{diff:+.2f} ± {half:.2f}{' *' if entry[key]['resolved_vs_reference'] else ''}")
        welch.append(f"| {LABELS[variant]} | " + " | ".join(cells) + " |")
    for variant, entry in summary.items():
        if variant == REFERENCE or entry["test_bleu"]["welch_vs_reference"] is None:
            continue
        beyond = [name for key, name in metrics if entry[key]["resolved_vs_reference"]]
        within = [name for key, name in metrics if entry[key]["resolved_vs_reference"] is False]
        welch += [
            "",
            f"**{LABELS[variant]} vs sinusoidal:** beyond the noise in {', '.join(beyond) or 'none'}; within the noise "
            f"in {', '.join(within) or 'none'}.",
        ]
    notes = [
        "",
        f"Mean ± sample std over seeds {list(budget.seeds)}; `*` marks a difference from sinusoidal outside the 95 % "
        "Welch t interval of the difference of means (with 3 seeds only large gaps qualify).",
        *verdicts,
        *welch,
        "",
        f"Setup: embedded LibreOffice en→de pairs, {meta['train_pairs']} training pairs of ≤ {budget.max_length} "
        f"subwords, joint BPE vocabulary {budget.vocab_size}; {budget.layers}+{budget.layers} layers, d_model "
        f"{budget.d_model}, {budget.heads} heads, FFN {budget.ffn_dim}, dropout {budget.dropout}, tied embeddings; "
        f"{budget.steps} steps of {budget.batch_size} sentences (length-bucketed batches in random order), Adam β₂ 0.98, inverse-sqrt "
        f"schedule, peak LR {budget.learning_rate} after {budget.warmup_steps} warm-up steps, label smoothing "
        f"{budget.label_smoothing}. Accuracy: teacher-forced over all non-pad target tokens of the full test sets "
        f"({meta['test_segments']} in-domain, {meta['gnome_segments']} GNOME segments). BLEU / chrF: greedy "
        f"decoding (at most {budget.generation_length} subwords) of a fixed {budget.bleu_samples}-segment subset of "
        "each, sacrebleu "
        f"`{meta['bleu_signature']}` / `{meta['chrf_signature']}`. Step time: median "
        f"optimizer step (wall clock, and CPU time of the run's process) on {meta['machine']}, {budget.threads} "
        f"thread(s) per run, {meta['jobs']} run(s) at a time, relative to the sinusoidal run of the same seed. Sum of "
        f"the runs' training and scoring time divided by the runs at a time: {meta['run_minutes']:.0f} min (a long "
        "run counts up to its scoring at the budget's steps).",
        "",
        "The paper column is a different setting (WMT17, 5.9M pairs, a larger model trained far longer); only the "
        "ordering of the variants is comparable, not the absolute numbers. Its values come from the project's "
        "summary of the paper (arXiv 2603.04805; not checked against its full text).",
    ]
    return "\n".join(lines + notes) + "\n"


def plot(summary: dict, path: Path) -> None:
    """Mean ± std per variant (markers with error bars; dots: single seeds), one panel per metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(summary)
    panels = [
        [("test_accuracy", "in-domain accuracy (%)"), ("test_bleu", "in-domain BLEU"), ("test_chrf", "in-domain chrF"),
         ("test_source_gap", "in-domain source gap (acc. points)"), ("step_time_ratio", "step wall time / sinusoidal")],
        [("gnome_accuracy", "GNOME accuracy (%)"), ("gnome_bleu", "GNOME BLEU"), ("gnome_chrf", "GNOME chrF"),
         ("gnome_source_gap", "GNOME source gap (acc. points)"), ("step_cpu_time_ratio", "step CPU time / sinusoidal")],
    ]  # fmt: skip
    fig, axes = plt.subplots(2, 5, figsize=(20, 7))
    for row, row_panels in zip(axes, panels):
        for ax, (key, title) in zip(row, row_panels):
            for i, variant in enumerate(variants):
                stat = summary[variant][key]
                if stat["mean"] is None:
                    continue
                color = (
                    "tab:gray" if variant == REFERENCE else "tab:orange" if variant.startswith("agf") else "tab:blue"
                )
                ax.errorbar(i, stat["mean"], yerr=stat["std"], fmt="o", color=color, capsize=4, markersize=7)
                ax.scatter([i] * len(stat["values"]), stat["values"], s=10, color="black", zorder=3)
            reference = summary.get(REFERENCE, {}).get(key, {}).get("mean")
            if reference is not None:
                ax.axhline(reference, color="tab:gray", linewidth=0.8, linestyle="--")
            ax.set_xticks(range(len(variants)), [LABELS[v] for v in variants], rotation=45, ha="right", fontsize=8)
            ax.set_xlim(-0.6, len(variants) - 0.4)
            ax.set_title(title, fontsize=10)
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Position encodings under one budget: mean ± std over seeds (black dots: single seeds)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _load_records(path: Path, budget_key: str) -> list[dict]:
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("budget") == budget_key]


def pilot(budget: Budget, cache_dir: Path, variants: list[str], steps: int, jobs: int) -> None:
    """Times `steps` steps of every variant and one evaluation, and prints the estimated sweep duration.

    Estimates use the CPU time of the single-threaded runs, i.e. what they take on idle cores, and the wall time
    seen now (higher when other work shares the machine). The evaluation is timed on an untrained model, which
    never stops decoding early, so that part is an upper bound.
    """
    prepare_data(budget, cache_dir)
    cpu, wall = {}, {}
    for variant in variants:
        record = run_one(variant, 0, budget, cache_dir, evaluate=False, steps=steps)
        cpu[variant], wall[variant] = record["step_cpu_time"], record["step_time"]
        print(
            f"  {LABELS[variant]:<22} {1000 * cpu[variant]:6.0f} ms CPU/step  {1000 * wall[variant]:6.0f} ms wall/step"
        )
    start, start_cpu = time.perf_counter(), time.process_time()
    run_one(REFERENCE, 0, budget, cache_dir, steps=2)
    eval_wall, eval_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    print(f"evaluation of one run (both test sets, untrained model): {eval_cpu:.0f} s CPU, {eval_wall:.0f} s wall")
    for name, times, evals in (("idle cores (CPU time)", cpu, eval_cpu), ("current load (wall)", wall, eval_wall)):
        total = sum(budget.steps * t + evals for t in times.values()) * len(budget.seeds) / max(1, jobs)
        print(
            f"estimated sweep on {name}: {len(variants)} variants × {len(budget.seeds)} seeds × {budget.steps} "
            f"steps, --jobs {jobs}: ≤ {total / 60:.0f} min (plus data preparation, once)"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (< 1 min)")
    parser.add_argument("--pilot", action="store_true", help="time each variant briefly and print the sweep estimate")
    parser.add_argument("--pilot-steps", type=int, default=20)
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=list(DEFAULT_VARIANTS), help="[%(default)s]"
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="override the budget's seeds")
    parser.add_argument("--steps", type=int, help="override the budget's training steps")
    parser.add_argument("--threads", type=int, help="torch threads per run [1]")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel processes (timings get noisier)")
    parser.add_argument(
        "--report-only", action="store_true", help="write the report from the finished runs; run nothing"
    )
    parser.add_argument(
        "--long",
        type=int,
        metavar="STEPS",
        help="also train --long-variants this many steps (first seed), with a source-gap curve; their scores at the "
        "budget's steps are that seed's ablation runs",
    )
    parser.add_argument("--long-variants", nargs="+", choices=list(VARIANTS), default=list(LONG_VARIANTS))
    parser.add_argument("--curve-every", type=int, default=500, help="steps between curve points of --long [500]")
    parser.add_argument("--output-dir", default="benchmarks/out/position_ablation", help="[%(default)s]")
    parser.add_argument("--report-dir", help="where the .md / .png / .json go [benchmarks/results, quick: output-dir]")
    args = parser.parse_args(argv)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    budget = QUICK if args.quick else FULL
    if args.seeds:
        budget = replace(budget, seeds=tuple(args.seeds))
    if args.steps:
        budget = replace(budget, steps=args.steps, warmup_steps=min(budget.warmup_steps, max(1, args.steps // 10)))
    if args.threads:
        budget = replace(budget, threads=args.threads)
    if REFERENCE not in args.variants:
        parser.error(f"--variants must include the reference {REFERENCE!r} (step-time ratios and noise tests)")
    out = Path(args.output_dir) / ("quick" if args.quick else "full")
    out.mkdir(parents=True, exist_ok=True)
    report = Path(args.report_dir or (out if args.quick else "benchmarks/results"))
    report.mkdir(parents=True, exist_ok=True)

    import torch

    torch.set_num_threads(budget.threads)
    if args.pilot:
        pilot(budget, out, args.variants, args.pilot_steps, args.jobs)
        return 0

    start = time.perf_counter()
    tokenizer, raw, tokenized = prepare_data(budget, out)
    runs_file = out / "runs.jsonl"
    records = _load_records(runs_file, budget.key())
    done = {(r["variant"], r["seed"]) for r in records}
    long_file = out / "long_runs.jsonl"
    long_records = [r for r in _load_records(long_file, budget.key()) if r["steps"] == args.long]
    long_done = {r["variant"] for r in long_records}
    jobs = []
    if args.long:
        if args.long <= budget.steps:
            parser.error(f"--long must exceed the budget's {budget.steps} steps")
        seed = budget.seeds[0]
        for variant in args.long_variants:
            if variant not in long_done:
                jobs.append(dict(variant=variant, seed=seed, steps=args.long, curve_every=args.curve_every))
                done.add((variant, seed))  # its ablation run is the long run at the budget's step count
    # seed-major order: each seed's variants run close together in time, so load drift hits them alike
    jobs += [dict(variant=v, seed=s) for s in budget.seeds for v in args.variants if (v, s) not in done]
    jobs = [dict(job, budget=budget, cache_dir=out) for job in jobs]
    if args.report_only:
        jobs = []
        args.variants = [v for v in args.variants if any(r["variant"] == v for r in records)]
    print(f"{len(jobs)} runs to do, {len(records)} already in {runs_file}", flush=True)

    def record_done(record):
        if "at_budget" in record:
            long_records.append({k: v for k, v in record.items() if k != "at_budget"})
            with long_file.open("a") as f:
                f.write(json.dumps(long_records[-1]) + "\n")
            record = record["at_budget"]
            if any((r["variant"], r["seed"]) == (record["variant"], record["seed"]) for r in records):
                return  # a long run redone; the ablation keeps its first record
        records.append(record)
        with runs_file.open("a") as f:
            f.write(json.dumps(record) + "\n")
        t = record.get("test", {})
        print(
            f"[{(time.perf_counter() - start) / 60:5.1f} min] {LABELS[record['variant']]:<22} seed {record['seed']}: "
            f"acc {t.get('accuracy', float('nan')):.2f}  BLEU {t.get('bleu', float('nan')):.2f}  "
            f"gap {t.get('source_gap') or float('nan'):.2f}  step {1000 * record['step_time']:.0f} ms",
            flush=True,
        )

    if args.jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for future in as_completed([pool.submit(_run_job, job) for job in jobs]):
                record_done(future.result())
    else:
        for job in jobs:
            record_done(run_one(**job))
    if long_records:
        order = {v: i for i, v in enumerate(args.long_variants)}
        print(long_report(sorted(long_records, key=lambda r: order.get(r["variant"], 99)), budget, report))

    summary = summarize(records, args.variants)
    meta = {
        "train_pairs": len(tokenized["train"]),
        "test_segments": len(raw["test"]),
        "gnome_segments": len(raw["gnome"]),
        "machine": f"{platform.machine()} CPU ({os.cpu_count()} cores)",
        "wall_minutes": (time.perf_counter() - start) / 60,
        # summed over the reported runs (a resumed or report-only sweep has no single wall time)
        "run_minutes": sum(
            r["train_seconds"] + r.get("eval_seconds", 0) for r in records if r["variant"] in args.variants
        )
        / 60
        / max(1, args.jobs),
        "jobs": args.jobs,
        "budget": asdict(budget),
        "torch": torch.__version__,
    }
    meta["bleu_signature"] = records[0]["test"]["bleu_signature"]
    meta["chrf_signature"] = records[0]["test"]["chrf_signature"]
    table = markdown_table(summary, budget, meta)
    (report / "position_ablation.md").write_text(table, encoding="utf-8")
    (report / "position_ablation.json").write_text(
        json.dumps({"meta": meta, "summary": summary}, indent=2) + "\n", encoding="utf-8"
    )
    plot(summary, report / "position_ablation.png")
    print(table)
    print(f"wrote {report / 'position_ablation.md'}, .png and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
