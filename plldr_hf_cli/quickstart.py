"""`plldr-hf quickstart`: the package's main job on its embedded data, end to end, in a fixed number of steps.

1. PLDR-LLM: train a small model on the embedded Shakespeare corpus with the DAG regulariser (`PldrTrainer`'s `DagSchedule`),
   report validation perplexity and the order parameters, try `collapse()` (and say whether the model is invariant
   enough, with the numbers), generate samples, and measure where collapse pays: scoring forwards
   (`collapse_speedup`, collapsed / uncollapsed throughput) and greedy decoding.
2. Translator (model_type `agf`; the AGF paper's AGF + PCM-V with absolute sinusoids added by default, `--translator
   sinusoidal` for the vanilla baseline, `--translator agf+pcmv` for pure AGF + PCM-V): train a small
   encoder–decoder on the embedded LibreOffice en→de pairs with the recipe of `plldr-hf train agf --size small
   --vocab-size 4000 --learning-rate 0.002 --warmup-steps 200` and score BLEU, chrF (sacrebleu, beam 4) and
   teacher-forced token accuracy on 300 test segments, with example translations next to their references.

Reproducible by default: both stages run their planned steps (`QuickstartPlan`) on a fixed number of CPU threads,
so any machine gives the same scores for the same code; a slower machine only takes longer (the progress bars show
how long). `--minutes M` adds a time budget instead (`Deadline`): a stage that runs out of it stops early, and then
`summary.md` and `metrics.json` open with a warning that the scores are not the quickstart's results.

Everything lands in the output directory: both models with their tokenizers, `summary.md`, `metrics.json` and PNG
plots (loss curves with validation points, order parameter per layer, AGF coefficient curves with their initial
values). Each saved model is reloaded with the Auto classes at the end and checked against the in-memory model.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from plldr_hf.timing import decode_speeds, scoring_speeds


logger = logging.getLogger(__name__)

PLDR_PROMPTS = ["ROMEO:", "To be, or not to be", "My lord, the king", "What light through yonder"]


# the two plans, field by field
PLANS = {
    # the main job: about 5 minutes on an idle 2-core CPU. The AGF recipe is the one of `plldr-hf train agf --size
    # small --vocab-size 4000 --learning-rate 0.002 --warmup-steps 200`, with length-bucketed batches
    "default": dict(
        pldr_size="mini", pldr_steps=400, pldr_block_size=128, pldr_batch_size=8, pldr_vocab=2048,
        agf_size="small", agf_steps=3000, agf_train_samples=None, agf_test_samples=300, agf_vocab=4000,
        agf_max_length=64, agf_learning_rate=2e-3, agf_warmup_steps=200, agf_beams=4, decode_new_tokens=48,
        reference_minutes=5.0,
    ),
    # the smoke test: tiny models and a few dozen steps each, well under a minute
    "tiny": dict(
        pldr_size="tiny", pldr_steps=40, pldr_block_size=64, pldr_batch_size=8, pldr_vocab=512,
        agf_size="tiny", agf_steps=60, agf_train_samples=2000, agf_test_samples=60, agf_vocab=1000,
        agf_max_length=32, agf_learning_rate=3e-3, agf_warmup_steps=10, agf_beams=1, decode_new_tokens=16,
        reference_minutes=0.5,
    ),
}  # fmt: skip


@dataclass
class QuickstartPlan:
    """Sizes and step counts of one quickstart. `max_steps` fixes each learning-rate schedule and, unless `minutes`
    sets a time budget, each stage's length; `threads` fixes the CPU threads, so the arithmetic (and every score) is
    the same on any machine with the same torch build."""

    name: str
    pldr_size: str
    pldr_steps: int
    pldr_block_size: int
    pldr_batch_size: int
    pldr_vocab: int
    agf_size: str
    agf_steps: int
    agf_train_samples: int | None
    agf_test_samples: int
    agf_vocab: int
    agf_max_length: int
    agf_learning_rate: float
    agf_warmup_steps: int
    agf_beams: int
    decode_new_tokens: int
    # wall minutes of the whole run on an idle 2-core x86-64 CPU, measured from a fresh clone (README, Quickstart)
    reference_minutes: float
    # the translator's position handling, a key of `position_encodings.POSITION_VARIANTS`. The paper's method with
    # the vanilla model's absolute sinusoids added by default: at this CPU budget pure AGF + PCM-V barely uses its
    # source and stays at BLEU < 1, while the hybrid matches or beats the sinusoidal baseline (README, position
    # ablation and quickstart comparison)
    translator: str = "agf+pcmv+abs"
    # an optional time budget in minutes: stages stop early when it runs out (and the summary says so)
    minutes: float | None = None
    # CPU threads of the run (torch.set_num_threads): results depend on the thread count through float rounding
    threads: int = 2
    progress: bool = True
    # most of a time budget the PLDR stage may use; the translator needs the rest to learn to translate
    pldr_share: float = 0.3
    # seconds of a time budget kept back for the translator's test scoring (beam 4, 300 segments), the reload
    # checks and the summary: measured ≈ 31 s on 2 cores
    agf_reserve_s: float = 40.0
    # the least time a budget gives a stage, however little is left
    min_stage_s: float = 30.0

    @classmethod
    def named(cls, name: str = "default", **changes) -> QuickstartPlan:
        """`"default"`: the main job (about 5 minutes on an idle 2-core CPU); `"tiny"`: tiny models and a few dozen
        steps each (a smoke test, well under a minute). `changes`: other fields, e.g. `minutes=10`."""
        if name not in PLANS:
            raise ValueError(f"unknown quickstart plan {name!r}; choose one of {sorted(PLANS)}")
        plan = replace(cls(name=name, **PLANS[name]), **changes)
        if plan.minutes is not None and not plan.minutes > 0:
            raise ValueError(f"--minutes must be positive, got {plan.minutes}")
        if plan.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {plan.threads}")
        return plan

    def describe(self) -> str:
        """One line: what will run and about how long it takes."""
        clock = (
            f"a time budget of {self.minutes:g} min (stages stop early when it runs out, and the summary says so)"
            if self.minutes is not None
            else f"fixed steps, so the scores are the same on any machine; about {self.reference_minutes:g} min on an "
            "idle 2-core CPU, longer on a slower or busy one (the bars show the time left)"
        )
        return (
            f"plan '{self.name}': PLDR-LLM {self.pldr_size} {self.pldr_steps} steps, translator {self.agf_size} "
            f"{self.agf_steps} steps, {self.threads} CPU threads; {clock}"
        )


class Deadline:
    """One clock for the whole run: each stage gets what is left of the budget, minus what later stages need."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.start = time.perf_counter()

    def left(self) -> float:
        """Seconds left of the budget (infinite without one)."""
        if self.seconds is None:
            return math.inf
        return self.seconds - (time.perf_counter() - self.start)

    def callbacks(self, plan: QuickstartPlan, seconds: float) -> list:
        """A `TimeBudgetCallback` of `seconds` (at least `plan.min_stage_s`) when the plan has a time budget; none
        otherwise (the stage runs its planned steps)."""
        from plldr_hf.training.callbacks import TimeBudgetCallback

        return [TimeBudgetCallback(max(plan.min_stage_s, seconds))] if plan.minutes is not None else []


def step(message: str) -> None:
    """One progress line on stdout for work without a progress bar of its own (so no minute passes silently)."""
    print(f"      {message}", flush=True)


def run_pldrllm(plan: QuickstartPlan, out: Path, deadline: Deadline) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from plldr_hf.models.pldrllm.diagnostics import diagnose
    from plldr_hf.models.pldrllm.plots import save_diagnostics
    from plldr_hf.training.options import TrainOptions
    from plldr_hf.training.run import train

    run_dir = out / "pldrllm"
    budget = deadline.callbacks(plan, plan.pldr_share * (deadline.seconds or 0))
    options = TrainOptions(
        size=plan.pldr_size,
        output_dir=str(run_dir),
        max_steps=plan.pldr_steps,
        block_size=plan.pldr_block_size,
        batch_size=plan.pldr_batch_size,
        vocab_size=plan.pldr_vocab,
        warmup_steps=max(1, plan.pldr_steps // 10),
        dag_weights=(0.05, 0.05, 0.05),
        dag_warmup_steps=max(1, plan.pldr_steps // 4),
        logging_steps=max(1, plan.pldr_steps // 20),
        eval_steps=max(1, plan.pldr_steps // 4),
        save_steps=plan.pldr_steps,
        save_total_limit=1,
        max_eval_blocks=64,
        report_to=["tensorboard"],
        no_progress=not plan.progress,
    )
    step("tokenizer and data; the order parameters of the initial model")
    report = train(options, callbacks=budget)
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForCausalLM.from_pretrained(run_dir).eval()

    # the default calibration inputs of train, diagnose and collapse: every order parameter below is the same number
    step("order parameters and collapse() on the calibration inputs")
    diagnostics = diagnose(model, new_tokens=16)
    save_diagnostics(diagnostics, run_dir / "diagnostics")

    # collapse() measures first and refuses a model whose G still depends on the input
    collapsed = AutoModelForCausalLM.from_pretrained(run_dir).eval()
    try:
        collapse_report = collapsed.collapse()
        refused = None
    except ValueError as error:
        refused = str(error)
        collapse_report = collapsed.collapse(force=True)
    collapsed_dir = out / "pldrllm-collapsed"
    collapsed.save_pretrained(collapsed_dir)
    tokenizer.save_pretrained(collapsed_dir)
    (collapsed_dir / "collapse_report.json").write_text(json.dumps(collapse_report.to_dict(), indent=2))

    step("samples, then greedy-decoding and scoring speed (interleaved rounds)")
    samples = []
    for text in PLDR_PROMPTS[:3]:
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            generated = model.generate(ids, max_new_tokens=40, do_sample=True, top_p=0.9, temperature=0.8)
        samples.append({"prompt": text, "text": tokenizer.decode(generated[0], skip_special_tokens=True)})

    prompt = torch.randint(6, len(tokenizer), (1, 32), generator=torch.Generator().manual_seed(0))
    speed = decode_speeds(
        {"uncollapsed_kv_g_cache_tok_s": model, "collapsed_tok_s": collapsed}, prompt, plan.decode_new_tokens
    )
    speed.update(prompt_tokens=prompt.shape[1], new_tokens=plan.decode_new_tokens)
    speed["collapsed_over_uncollapsed"] = speed["collapsed_tok_s"] / speed["uncollapsed_kv_g_cache_tok_s"]
    # where collapse pays: a forward over whole sequences runs the metric learner once per layer and batch row
    # (decoding reuses the G cache, so there it costs the same either way)
    batch = torch.randint(6, len(tokenizer), (16, 64), generator=torch.Generator().manual_seed(1))
    scoring = scoring_speeds({"uncollapsed_tok_s": model, "collapsed_tok_s": collapsed}, batch)
    scoring.update(batch_size=batch.shape[0], sequence_length=batch.shape[1], rounds=7)
    return {
        "run_dir": str(run_dir),
        "collapsed_dir": str(collapsed_dir),
        "parameters": report.parameters,
        "steps": report.global_step,
        "max_steps": report.max_steps,
        "stopped_by_time_budget": any(b.stopped_early for b in budget),
        "s_per_step": report.seconds_per_step,
        "dag_weights": list(report.options["dag_weights"]),
        "validation_perplexity": report.scores["validation"]["perplexity"],
        "validation_blocks": report.scores["validation"]["blocks"],
        "tokens_per_block": report.scores["validation"]["tokens_per_block"],
        "order_parameter_before": report.diagnostics["order_parameter_before"],
        "order_parameter_after": report.diagnostics["order_parameter_after"],
        "order_parameter_prompts": dict(diagnostics.order_parameter_inputs),
        "order_parameter_per_layer": dict(diagnostics.order_parameter_inputs_per_layer),
        "collapse": {
            "invariant": collapse_report.invariant,
            "refused": refused,
            "tolerance": collapse_report.tolerance,
            "order_parameter": collapse_report.order_parameter,
            "order_parameter_per_layer": collapse_report.per_layer,
            "order_parameter_pooled": collapse_report.order_parameter_pooled,
            "order_parameter_rms": collapse_report.order_parameter_rms,
            "aggregation": dict(collapse_report.AGGREGATION),
            "max_abs_logit_diff": collapse_report.max_abs_logit_diff,
            "argmax_agreement": collapse_report.argmax_agreement,
        },
        "samples": samples,
        "decode_speed": speed,
        "scoring_speed": scoring,
        "collapse_speedup": scoring["collapsed_tok_s"] / scoring["uncollapsed_tok_s"],
        "plots": {
            "loss_curves": report.loss_curves,
            "order_parameter": str(run_dir / "diagnostics" / "order_parameter.png"),
            "singular_values": str(run_dir / "diagnostics" / "singular_values_A.png"),
        },
        "plots_skipped": {"loss_curves": report.loss_curves_skipped} if report.loss_curves_skipped else {},
    }


def example_rows(dataset, hypotheses: list[str], count: int = 4, words: tuple[int, int] = (4, 12)) -> list[dict]:
    """The first `count` test segments whose source has `words` words (short enough to read in a table, long
    enough to be sentences), with their references and the scored translations: a fixed rule, not a selection by
    quality."""
    rows = []
    for pair, hypothesis in zip(dataset["translation"], hypotheses):
        if words[0] <= len(pair["en"].split()) <= words[1]:
            rows.append({"source": pair["en"], "reference": pair["de"], "translation": hypothesis})
        if len(rows) == count:
            break
    return rows


def run_agf(plan: QuickstartPlan, out: Path, deadline: Deadline) -> dict:
    from plldr_hf.models.agf.plots import coefficient_change, plot_coefficient_curves
    from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS
    from plldr_hf.training.options import TranslationOptions
    from plldr_hf.training.run import train

    run_dir = out / "agf"
    label, fields = POSITION_VARIANTS[plan.translator]
    position_encoding, pcmv = fields["position_encoding"], fields.get("pcmv", False)
    # the variant's other config fields (e.g. `absolute_positions` of the hybrid)
    overrides = {k: v for k, v in fields.items() if k not in ("position_encoding", "pcmv")}
    budget = deadline.callbacks(plan, deadline.left() - plan.agf_reserve_s)
    eval_steps = max(1, plan.agf_steps // 10)
    step("joint tokenizer and data")
    options = TranslationOptions(
        dataset=["libreoffice"],
        size=plan.agf_size,
        position_encoding=position_encoding,
        pcmv=pcmv,
        model_overrides=overrides,
        vocab_size=plan.agf_vocab,
        max_source_length=plan.agf_max_length,
        max_target_length=plan.agf_max_length,
        max_train_samples=plan.agf_train_samples,
        max_eval_samples=64,
        max_test_samples=plan.agf_test_samples,
        test_splits=("test",),
        num_beams=plan.agf_beams,
        output_dir=str(run_dir),
        max_steps=plan.agf_steps,
        warmup_steps=plan.agf_warmup_steps,
        learning_rate=plan.agf_learning_rate,
        batch_size=32,
        eval_steps=eval_steps,
        save_steps=plan.agf_steps,
        logging_steps=max(1, plan.agf_steps // 30),
        # the validation curve: teacher-forced loss and accuracy (decoding is left to the final test scoring)
        trainer_args=dict(predict_with_generate=False, save_total_limit=1),
        no_progress=not plan.progress,
    )
    run = train(options, callbacks=budget)
    test = run.scores["test"]
    plots, skipped = {}, {}
    if run.loss_curves:
        plots["loss_curves"] = run.loss_curves
    else:
        skipped["loss_curves"] = run.loss_curves_skipped
    if position_encoding == "agf":
        plots["agf_coefficients"] = str(plot_coefficient_curves(run.model, run_dir / "agf_coefficients.png"))
    validation = [
        {"step": h["step"], "loss": h["eval_loss"], "accuracy": h.get("eval_accuracy")}
        for h in run.log_history
        if "eval_loss" in h
    ]
    return {
        "run_dir": str(run_dir),
        "parameters": run.parameters,
        "steps": run.global_step,
        "max_steps": run.max_steps,
        "position_encoding": position_encoding,
        "pcmv": pcmv,
        "stopped_by_time_budget": any(b.stopped_early for b in budget),
        "train_seconds": run.train_seconds,
        "validation_pairs": run.eval_examples,
        "test_segments": len(run.datasets["test"]),
        "num_beams": test["num_beams"],
        "bleu": test["bleu"],
        "bleu_signature": test["bleu_signature"],
        "chrf": test["chrf"],
        "chrf_signature": test["chrf_signature"],
        "accuracy": test["accuracy"],
        "wrong_source_accuracy": test["wrong_source_accuracy"],
        "source_gap": test["source_gap"],
        "validation": validation,
        "coefficient_change": coefficient_change(run.model),
        "examples": example_rows(run.datasets["test"], test["hypotheses"]),
        "translator": label,
        "translator_variant": plan.translator,
        "position_config": fields,
        "plots": plots,
        "plots_skipped": skipped,
    }


def check_reload(out: Path, results: dict) -> dict:
    """Reload every saved model with the Auto classes (no trust_remote_code) and compare logits on a fixed input."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    checks = {}
    for name, key, auto in (
        ("pldrllm", "run_dir", AutoModelForCausalLM),
        ("pldrllm-collapsed", "collapsed_dir", AutoModelForCausalLM),
    ):
        folder = results["pldrllm"][key]
        tokenizer = AutoTokenizer.from_pretrained(folder)
        ids = tokenizer(PLDR_PROMPTS[0], add_special_tokens=False, return_tensors="pt")["input_ids"]
        first, second = auto.from_pretrained(folder).eval(), auto.from_pretrained(folder).eval()
        with torch.no_grad():
            checks[name] = {
                "class": type(first).__name__,
                "identical": bool(torch.equal(first(ids).logits, second(ids).logits)),
            }
        checks[name]["collapsed"] = bool(first.config.collapsed)
    folder = results["agf"]["run_dir"]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = tokenizer(["Click the button."], return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=8, do_sample=False)
    checks["agf"] = {"class": type(model).__name__, "generates": generated.shape[1] > 1}
    return checks


def _fmt(value, spec=".3g"):
    return "n/a" if value is None else format(value, spec)


def shortfalls(results: dict) -> list[str]:
    """One warning per stage that ran fewer steps than planned (a time budget stopped it): its scores are then not
    the quickstart's results and depend on the machine's speed."""
    warnings = []
    for key, name in (("pldrllm", "PLDR-LLM"), ("agf", "translator")):
        stage = results.get(key) or {}
        if stage and stage["steps"] < stage["max_steps"]:
            share = stage["steps"] / stage["max_steps"]
            warnings.append(
                f"the time budget (--minutes {results['plan']['minutes']:g}) stopped the {name} after "
                f"{stage['steps']:,} of {stage['max_steps']:,} planned steps ({100 * share:.0f}%): its scores are "
                f"{'far ' if share < 0.5 else ''}below what the plan reaches, depend on this machine's speed and are "
                "not comparable with the README; run without --minutes for the fixed plan"
            )
    return warnings


def write_summary(out: Path, results: dict) -> Path:
    p, a = results["pldrllm"], results["agf"]
    op_before, op_after = p["order_parameter_before"] or {}, p["order_parameter_after"] or {}
    collapse = p["collapse"]
    warnings = results["warnings"]
    pldr_short = p["steps"] < p["max_steps"]
    agf_short = a["steps"] < a["max_steps"]
    lines = ["# plldr_hf quickstart", ""]
    if warnings:
        lines += [f"**WARNING: {warning}.**" for warning in warnings] + [""]
    else:
        lines += [
            f"Every stage ran its planned steps (plan '{results['plan']['name']}', {results['plan']['threads']} CPU "
            "threads): the scores below are the quickstart's results, the same on any machine with this code and "
            "torch build.",
            "",
        ]
    lines += [
        f"Wall time {results['wall_minutes']:.1f} min"
        + (f" (budget {results['plan']['minutes']:g} min)" if results["plan"]["minutes"] is not None else "")
        + f"; torch {results['versions']['torch']}, transformers {results['versions']['transformers']}, "
        f"{results['versions']['threads']} CPU threads"
        + (
            " (the machine was busy at the start: OpenMP threads sleep while they wait, OMP_WAIT_POLICY=PASSIVE)."
            if results["versions"]["omp_wait_policy"] == "PASSIVE"
            else "."
        ),
        "",
        "## PLDR-LLM on the embedded Shakespeare corpus",
        "",
        f"- {p['parameters'] / 1e6:.2f}M parameters, {p['steps']} of {p['max_steps']} steps"
        + (" (**stopped by the time budget: not the planned run**)" if pldr_short else "")
        + f", {_fmt(p['s_per_step'])} s/step (train_runtime / steps), DAG weights "
        + ", ".join(f"{w:g}" for w in p["dag_weights"])
        + " on A_LM, A_P, G_LM (after a warm-up).",
        f"- Validation perplexity: **{p['validation_perplexity']:.2f}** over the first {p['validation_blocks']} "
        f"blocks of {p['tokens_per_block']} tokens of the validation plays (`plldr-hf evaluate` scores them all)"
        + (" (after a shortened run; not comparable)" if pldr_short else "")
        + ".",
        "- Order parameter of G_LM (SOC RMSE / |mean| across the calibration inputs, maximum over layers; the collapse "
        f"criterion; ≈ 0 means input-invariant): before training "
        f"{_fmt(op_before.get('across_inputs_max_over_layers', {}).get('G_LM'))}, after "
        f"{_fmt(op_after.get('across_inputs_max_over_layers', {}).get('G_LM'))}.",
        "",
        "| tensor | order parameter (SOC across inputs, max over layers) | per layer | pooled over layers "
        "| audit RMS (max over pairs and layers) |",
        "|---|---|---|---|---|",
    ]
    for name, value in collapse["order_parameter"].items():
        per_layer = ", ".join(f"{v:.3g}" for v in collapse["order_parameter_per_layer"][name])
        lines.append(
            f"| {name} | {value:.3g} | {per_layer} | {collapse['order_parameter_pooled'][name]:.3g} "
            f"| {collapse['order_parameter_rms'][name]:.3g} |"
        )
    if collapse["refused"]:
        verdict = (
            f"`collapse()` **refused**: G_LM's order parameter {collapse['order_parameter']['G_LM']:.3g} exceeds the "
            f"tolerance {collapse['tolerance']:g}, so this short run is not input-invariant (the paper's collapse "
            "appears after far longer near-critical training). For the speed comparison it was collapsed with "
            f"`force=True`, an approximation: max |Δlogit| {collapse['max_abs_logit_diff']:.3g}, argmax agreement "
            f"{100 * collapse['argmax_agreement']:.1f}% on the calibration inputs."
        )
    else:
        verdict = (
            f"`collapse()` accepted the model (G_LM order parameter {collapse['order_parameter']['G_LM']:.3g} ≤ "
            f"{collapse['tolerance']:g}); max |Δlogit| {collapse['max_abs_logit_diff']:.3g}."
        )
    speed, scoring = p["decode_speed"], p["scoring_speed"]
    lines += [
        "",
        verdict,
        "",
        f"Where collapse pays: scoring forwards (batch {scoring['batch_size']} × {scoring['sequence_length']} "
        f"tokens, no cache, as lm-eval's log-likelihoods) run the metric learner once per layer and row unless "
        f"collapsed: uncollapsed {scoring['uncollapsed_tok_s']:.0f} tok/s, collapsed {scoring['collapsed_tok_s']:.0f} "
        f"tok/s, **collapse speed-up {p['collapse_speedup']:.2f}×** (median of {scoring['rounds']} interleaved "
        "rounds; speeds are this machine's, unlike the scores).",
        "",
        f"Greedy decoding, batch 1, {speed['prompt_tokens']}-token prompt, {speed['new_tokens']} new tokens: "
        f"uncollapsed (KV + G cache) {speed['uncollapsed_kv_g_cache_tok_s']:.1f} tok/s, collapsed "
        f"{speed['collapsed_tok_s']:.1f} tok/s ({speed['collapsed_over_uncollapsed']:.2f}×; median of 5 interleaved "
        "runs each). Decoding costs the same either way at this size: the G cache already skips the metric learner "
        "for every new token.",
        "",
        "Samples (top-p 0.9, temperature 0.8):",
        "",
    ]
    lines += [f"- `{s['prompt']}` → {s['text']!r}" for s in p["samples"]]
    test_line = (
        f"- Test split ({a['test_segments']} segments, beam {a['num_beams']}): BLEU **{a['bleu']:.2f}**, chrF "
        f"**{a['chrf']:.2f}**, token accuracy **{100 * a['accuracy']:.2f}%** (teacher-forced)"
    )
    if a.get("source_gap") is not None:
        test_line += (
            f"; with every target paired with another segment's source the accuracy is "
            f"{100 * a['wrong_source_accuracy']:.2f}%, a **source gap of {100 * a['source_gap']:.2f} points** (how much "
            "the decoder uses its source)"
        )
    if agf_short:
        # a BLEU is never printed without the warning when the run was cut short
        test_line += (
            f" — **WARNING: after {a['steps']:,} of {a['max_steps']:,} steps only (time budget); not the "
            "quickstart's result and not comparable**"
        )
    lines += [
        "",
        f"## {a['translator']} translator (model_type agf) on the embedded LibreOffice en→de pairs",
        "",
        f"- {a['parameters'] / 1e6:.2f}M parameters, {a['steps']} of {a['max_steps']} steps in "
        f"{_fmt(a['train_seconds'], '.0f')} s"
        + (" (**stopped by the time budget: not the planned run**)" if agf_short else "")
        + ".",
        test_line + ".",
        f"- sacreBLEU signatures: `{a['bleu_signature']}`; `{a['chrf_signature']}`.",
    ]
    if a["validation"]:
        last = a["validation"][-1]
        lines.append(
            f"- Validation ({a['validation_pairs']} pairs, teacher-forced) at step {last['step']}: loss {last['loss']:.3f}, token accuracy "
            f"{100 * (last['accuracy'] or 0):.1f}%"
            + (" (curve in `agf/loss_curves.png`)." if "loss_curves" in a["plots"] else ".")
        )
    change = a["coefficient_change"]
    if change is None:
        lines.append(
            f"- No AGF coefficient curves: this translator uses {a['translator']} positions (the default "
            "`--translator agf+pcmv+abs` trains AGF + PCM-V and plots them)."
        )
    else:
        moved = change["max_abs_log_change"]
        lines.append(
            f"- AGF coefficient curves: the largest change from their initialisation is a factor "
            f"{math.exp(moved):.2f} (|Δ log c| = {moved:.3f}, {change['module']}, head {change['head']})"
            + (
                "; they moved visibly (trained solid, initial dashed in `agf/agf_coefficients.png`)."
                if moved >= 0.1
                else "; they barely moved from their initialisation in this short run."
            )
        )
    lines += [
        "",
        "The first four test segments of 4–12 source words, as scored above:",
        "",
        "| source | reference | translation |",
        "|---|---|---|",
    ]
    lines += [
        "| " + " | ".join(_cell(e[key]) for key in ("source", "reference", "translation")) + " |"
        for e in a["examples"]
    ]
    lines += ["", "## Saved models (reloaded with the Auto classes)", ""]
    for name, check in results["reload"].items():
        lines.append(f"- `{name}`: {check}")
    lines += ["", "## Plots", ""]
    for name, path in {**p["plots"], **{f"agf_{k}": v for k, v in a["plots"].items()}}.items():
        if path:
            lines.append(f"- {name}: `{Path(path).relative_to(out)}`")
    for name, reason in {**p["plots_skipped"], **{f"agf_{k}": v for k, v in a["plots_skipped"].items()}}.items():
        lines.append(f"- {name}: not plotted, {reason}")
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _cell(text: str) -> str:
    """Text as one Markdown table cell (a `|` would split it; an empty translation would vanish)."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text or "(empty)"


def run_quickstart(
    output_dir: str | Path = "runs/quickstart",
    plan: QuickstartPlan | None = None,
    translator: str | None = None,
) -> dict:
    """Run `plan` (default `QuickstartPlan.named("default")`) into `output_dir`; returns what `metrics.json` holds.

    The run sets the plan's thread count and gives the process its own back afterwards (a quickstart called
    in-process, by a test or a notebook, must not change the float rounding of what runs after it)."""
    threads = torch.get_num_threads()
    try:
        return _run_quickstart(output_dir, plan, translator)
    finally:
        torch.set_num_threads(threads)


def _run_quickstart(output_dir, plan, translator) -> dict:
    import transformers

    from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS

    plan = plan or QuickstartPlan.named()
    if translator is not None:
        if translator not in POSITION_VARIANTS:
            raise ValueError(f"unknown translator {translator!r}; choose one of {', '.join(POSITION_VARIANTS)}")
        plan = replace(plan, translator=translator)
    torch.set_num_threads(plan.threads)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results = {
        "plan": asdict(plan),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "threads": torch.get_num_threads(),
            # set by the command line on a busy machine (`wait_threads_passively_when_busy`): no change in arithmetic
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        },
    }
    deadline = Deadline(plan.minutes * 60 if plan.minutes is not None else None)
    print(plan.describe(), flush=True)
    print(f"[1/3] PLDR-LLM ({plan.pldr_size}, {plan.pldr_steps} steps) on the embedded Shakespeare corpus", flush=True)
    results["pldrllm"] = run_pldrllm(plan, out, deadline)
    left = f"; {max(0.0, deadline.left()) / 60:.1f} min of the budget left" if plan.minutes is not None else ""
    print(
        f"[2/3] {POSITION_VARIANTS[plan.translator][0]} translator ({plan.agf_size}, {plan.agf_steps} steps) on the "
        f"embedded en-de pairs{left}",
        flush=True,
    )
    results["agf"] = run_agf(plan, out, deadline)
    print("[3/3] reloading the saved models with the Auto classes", flush=True)
    results["reload"] = check_reload(out, results)
    results["wall_minutes"] = (time.perf_counter() - start) / 60
    results["warnings"] = shortfalls(results)
    results["complete"] = not results["warnings"]
    (out / "metrics.json").write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    summary = write_summary(out, results)
    print(summary.read_text(encoding="utf-8"), end="")
    for warning in results["warnings"]:
        print(f"plldr-hf quickstart: WARNING: {warning}", file=sys.stderr)
    return results
