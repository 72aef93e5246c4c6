"""What `plldr-hf quickstart` measured, typed, and the `summary.md` written from it.

| result | holds |
|---|---|
| `QuickstartResult` | the plan, the versions, both stages, the reload checks, the wall time; its `warnings` |
| `PldrStage` | the PLDR-LLM's `RunReport`, its diagnostics, `collapse()`'s report, samples, decoding and scoring speed |
| `AgfStage` | the translator's `RunReport` (test scores in `run.scores["test"]`), its validation curve and examples |

The summary reads only these values: every number and count it prints (rounds, segments, word ranges, weights)
comes from what ran, so it cannot drift from the code. `as_json` turns a result into what `metrics.json` holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One sampled continuation of a prompt."""

    prompt: str
    text: str


@dataclass(frozen=True)
class DecodeSpeed:
    """Greedy decoding, batch 1: tokens per second of each model (median of `rounds` interleaved runs)."""

    uncollapsed_kv_g_cache_tok_s: float
    collapsed_tok_s: float
    prompt_tokens: int
    new_tokens: int
    rounds: int

    @property
    def collapsed_over_uncollapsed(self) -> float:
        return self.collapsed_tok_s / self.uncollapsed_kv_g_cache_tok_s


@dataclass(frozen=True)
class ScoringSpeed:
    """Scoring forwards without a cache (as lm-eval's log-likelihoods): tokens per second of each model over
    `batch_size` × `sequence_length` tokens (median of `rounds` interleaved rounds)."""

    uncollapsed_tok_s: float
    collapsed_tok_s: float
    batch_size: int
    sequence_length: int
    rounds: int


@dataclass
class PldrStage:
    """The PLDR-LLM stage: the training run's report, then what was measured on the saved model."""

    run: Any  # plldr_hf.training.RunReport
    collapsed_dir: str
    # the order parameters of `diagnose` on the calibration inputs (the numbers `collapse()` measures)
    order_parameter_prompts: dict
    order_parameter_per_layer: dict
    collapse: Any  # PldrllmCollapseReport of the collapsed copy
    collapse_refused: str | None  # collapse()'s refusal when the model was not input-invariant (then forced)
    samples: list[Sample]
    sample_settings: dict
    decode_speed: DecodeSpeed
    scoring_speed: ScoringSpeed
    stopped_by_time_budget: bool
    plots: dict[str, str] = field(default_factory=dict)
    plots_skipped: dict[str, str] = field(default_factory=dict)

    # properties written into metrics.json beside the fields
    DERIVED = ("collapse_speedup",)

    @property
    def collapse_speedup(self) -> float:
        """Collapsed / uncollapsed throughput of scoring forwards: where collapse pays."""
        return self.scoring_speed.collapsed_tok_s / self.scoring_speed.uncollapsed_tok_s

    @property
    def validation(self) -> dict:
        return self.run.scores["validation"]


@dataclass(frozen=True)
class ValidationPoint:
    step: int
    loss: float
    accuracy: float | None


@dataclass(frozen=True)
class Example:
    source: str
    reference: str
    translation: str


@dataclass(frozen=True)
class ExampleRule:
    """Which test segments are shown: the first `count` whose source has `words` words (short enough to read in a
    table, long enough to be sentences): a fixed rule, not a selection by quality."""

    count: int = 4
    words: tuple[int, int] = (4, 12)

    def pick(self, dataset, hypotheses: list[str]) -> list[Example]:
        rows = []
        for pair, hypothesis in zip(dataset["translation"], hypotheses):
            if self.words[0] <= len(pair["en"].split()) <= self.words[1]:
                rows.append(Example(pair["en"], pair["de"], hypothesis))
            if len(rows) == self.count:
                break
        return rows


@dataclass
class AgfStage:
    """The translator stage: the training run's report (test scores in `run.scores["test"]`) and its examples."""

    run: Any  # plldr_hf.training.RunReport
    translator: str  # the variant's label
    translator_variant: str  # its key in `position_encodings.POSITION_VARIANTS`
    position_config: dict
    coefficient_change: dict | None  # `agf.plots.coefficient_change`; None without AGF coefficients
    example_rule: ExampleRule
    examples: list[Example]
    stopped_by_time_budget: bool
    plots: dict[str, str] = field(default_factory=dict)
    plots_skipped: dict[str, str] = field(default_factory=dict)

    DERIVED = ("validation",)

    @property
    def test(self) -> dict:
        return self.run.scores["test"]

    @property
    def validation(self) -> list[ValidationPoint]:
        """The teacher-forced validation curve of the run."""
        return [
            ValidationPoint(h["step"], h["eval_loss"], h.get("eval_accuracy"))
            for h in self.run.log_history
            if "eval_loss" in h
        ]


@dataclass(frozen=True)
class ReloadCheck:
    """A saved model reloaded with the Auto classes: its class, and what was checked on it."""

    model_class: str
    checks: dict


@dataclass
class QuickstartResult:
    plan: Any  # QuickstartPlan
    versions: dict
    pldrllm: PldrStage
    agf: AgfStage
    reload: dict[str, ReloadCheck]
    wall_minutes: float

    DERIVED = ("warnings", "complete")

    @property
    def stages(self) -> dict:
        return {"PLDR-LLM": self.pldrllm, "translator": self.agf}

    @property
    def warnings(self) -> list[str]:
        """One warning per stage that ran fewer steps than planned (a time budget stopped it): its scores are then
        not the quickstart's results and depend on the machine's speed."""
        warnings = []
        for name, stage in self.stages.items():
            steps, planned = stage.run.global_step, stage.run.max_steps
            if steps < planned:
                share = steps / planned
                warnings.append(
                    f"the time budget (--minutes {self.plan.minutes:g}) stopped the {name} after {steps:,} of "
                    f"{planned:,} planned steps ({100 * share:.0f}%): its scores are "
                    f"{'far ' if share < 0.5 else ''}below what the plan reaches, depend on this machine's speed and "
                    "are not comparable with the README; run without --minutes for the fixed plan"
                )
        return warnings

    @property
    def complete(self) -> bool:
        return not self.warnings


def as_json(value):
    """A result as JSON-ready values: dataclasses field by field (plus their `DERIVED` properties), objects with a
    `to_dict` (`RunReport`, the collapse report) through it."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if is_dataclass(value):
        out = {f.name: as_json(getattr(value, f.name)) for f in fields(value)}
        out.update({name: as_json(getattr(value, name)) for name in getattr(value, "DERIVED", ())})
        return out
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    return value


def _fmt(value, spec=".3g"):
    return "n/a" if value is None else format(value, spec)


def _cell(text: str) -> str:
    """Text as one Markdown table cell (a `|` would split it; an empty translation would vanish)."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text or "(empty)"


def _short(stage) -> bool:
    return stage.run.global_step < stage.run.max_steps


def _headline(result: QuickstartResult) -> list[str]:
    plan, versions = result.plan, result.versions
    lines = ["# plldr_hf quickstart", ""]
    if result.warnings:
        lines += [f"**WARNING: {warning}.**" for warning in result.warnings] + [""]
    else:
        lines += [
            f"Every stage ran its planned steps (plan '{plan.name}', {plan.threads} CPU threads): the scores below "
            "are the quickstart's results, the same on any machine with this code and torch build.",
            "",
        ]
    budget = f" (budget {plan.minutes:g} min)" if plan.minutes is not None else ""
    passive = versions["omp_wait_policy"] == "PASSIVE"
    return lines + [
        f"Wall time {result.wall_minutes:.1f} min{budget}; torch {versions['torch']}, transformers "
        f"{versions['transformers']}, {versions['threads']} CPU threads"
        + (
            " (the machine was busy at the start: OpenMP threads sleep while they wait, OMP_WAIT_POLICY=PASSIVE)."
            if passive
            else "."
        ),
        "",
    ]


def _pldr_lines(stage: PldrStage) -> list[str]:
    run, validation, collapse = stage.run, stage.validation, stage.collapse
    short = _short(stage)
    before = (run.diagnostics.get("order_parameter_before") or {}).get("across_inputs_max_over_layers", {})
    after = (run.diagnostics.get("order_parameter_after") or {}).get("across_inputs_max_over_layers", {})
    lines = [
        "## PLDR-LLM on the embedded Shakespeare corpus",
        "",
        f"- {run.parameters / 1e6:.2f}M parameters, {run.global_step} of {run.max_steps} steps"
        + (" (**stopped by the time budget: not the planned run**)" if short else "")
        + f", {_fmt(run.seconds_per_step)} s/step (train_runtime / steps), DAG weights "
        + ", ".join(f"{w:g}" for w in run.options["dag_weights"])
        + " on A_LM, A_P, G_LM (after a warm-up).",
        f"- Validation perplexity: **{validation['perplexity']:.2f}** over the first {validation['blocks']} blocks of "
        f"{validation['tokens_per_block']} tokens of the validation plays (`plldr-hf evaluate` scores them all)"
        + (" (after a shortened run; not comparable)" if short else "")
        + ".",
        "- Order parameter of G_LM (SOC RMSE / |mean| across the calibration inputs, maximum over layers; the collapse "
        f"criterion; ≈ 0 means input-invariant): before training {_fmt(before.get('G_LM'))}, after "
        f"{_fmt(after.get('G_LM'))}.",
        "",
        "| tensor | order parameter (SOC across inputs, max over layers) | per layer | pooled over layers "
        "| audit RMS (max over pairs and layers) |",
        "|---|---|---|---|---|",
    ]
    for name, value in collapse.order_parameter.items():
        per_layer = ", ".join(f"{v:.3g}" for v in collapse.per_layer[name])
        lines.append(
            f"| {name} | {value:.3g} | {per_layer} | {collapse.order_parameter_pooled[name]:.3g} "
            f"| {collapse.order_parameter_rms[name]:.3g} |"
        )
    g_value = collapse.order_parameter["G_LM"]
    if stage.collapse_refused:
        verdict = (
            f"`collapse()` **refused**: G_LM's order parameter {g_value:.3g} exceeds the tolerance "
            f"{collapse.tolerance:g}, so this short run is not input-invariant (the paper's collapse appears after far "
            "longer near-critical training). For the speed comparison it was collapsed with `force=True`, an "
            f"approximation: max |Δlogit| {collapse.max_abs_logit_diff:.3g}, argmax agreement "
            f"{100 * collapse.argmax_agreement:.1f}% on the calibration inputs."
        )
    else:
        verdict = (
            f"`collapse()` accepted the model (G_LM order parameter {g_value:.3g} ≤ {collapse.tolerance:g}); "
            f"max |Δlogit| {collapse.max_abs_logit_diff:.3g}."
        )
    speed, scoring = stage.decode_speed, stage.scoring_speed
    settings = ", ".join(f"{key} {value:g}" for key, value in stage.sample_settings.items())
    lines += [
        "",
        verdict,
        "",
        f"Where collapse pays: scoring forwards (batch {scoring.batch_size} × {scoring.sequence_length} tokens, no "
        "cache, as lm-eval's log-likelihoods) run the metric learner once per layer and row unless collapsed: "
        f"uncollapsed {scoring.uncollapsed_tok_s:.0f} tok/s, collapsed {scoring.collapsed_tok_s:.0f} tok/s, "
        f"**collapse speed-up {stage.collapse_speedup:.2f}×** (median of {scoring.rounds} interleaved rounds; speeds "
        "are this machine's, unlike the scores).",
        "",
        f"Greedy decoding, batch 1, {speed.prompt_tokens}-token prompt, {speed.new_tokens} new tokens: uncollapsed "
        f"(KV + G cache) {speed.uncollapsed_kv_g_cache_tok_s:.1f} tok/s, collapsed {speed.collapsed_tok_s:.1f} tok/s "
        f"({speed.collapsed_over_uncollapsed:.2f}×; median of {speed.rounds} interleaved runs each). Decoding costs "
        "the same either way at this size: the G cache already skips the metric learner for every new token.",
        "",
        f"Samples ({settings}):",
        "",
    ]
    return lines + [f"- `{sample.prompt}` → {sample.text!r}" for sample in stage.samples]


def _agf_lines(stage: AgfStage) -> list[str]:
    run, test, short = stage.run, stage.test, _short(stage)
    test_line = (
        f"- Test split ({len(run.datasets['test'])} segments, beam {test['num_beams']}): BLEU **{test['bleu']:.2f}**, "
        f"chrF **{test['chrf']:.2f}**, token accuracy **{100 * test['accuracy']:.2f}%** (teacher-forced)"
    )
    if test.get("source_gap") is not None:
        test_line += (
            "; with every target paired with another segment's source the accuracy is "
            f"{100 * test['wrong_source_accuracy']:.2f}%, a **source gap of {100 * test['source_gap']:.2f} points** "
            "(how much the decoder uses its source)"
        )
    if short:
        # a BLEU is never printed without the warning when the run was cut short
        test_line += (
            f" — **WARNING: after {run.global_step:,} of {run.max_steps:,} steps only (time budget); not the "
            "quickstart's result and not comparable**"
        )
    lines = [
        f"## {stage.translator} translator (model_type agf) on the embedded LibreOffice en→de pairs",
        "",
        f"- {run.parameters / 1e6:.2f}M parameters, {run.global_step} of {run.max_steps} steps in "
        f"{_fmt(run.train_seconds, '.0f')} s"
        + (" (**stopped by the time budget: not the planned run**)" if short else "")
        + ".",
        test_line + ".",
        f"- sacreBLEU signatures: `{test['bleu_signature']}`; `{test['chrf_signature']}`.",
    ]
    if stage.validation:
        last = stage.validation[-1]
        lines.append(
            f"- Validation ({run.eval_examples} pairs, teacher-forced) at step {last.step}: loss {last.loss:.3f}, "
            f"token accuracy {100 * (last.accuracy or 0):.1f}%"
            + (" (curve in `agf/loss_curves.png`)." if "loss_curves" in stage.plots else ".")
        )
    change = stage.coefficient_change
    if change is None:
        lines.append(
            f"- No AGF coefficient curves: this translator uses {stage.translator} positions (the default "
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
    rule = stage.example_rule
    lines += [
        "",
        f"The first {rule.count} test segments of {rule.words[0]}–{rule.words[1]} source words, as scored above:",
        "",
        "| source | reference | translation |",
        "|---|---|---|",
    ]
    return lines + [
        "| " + " | ".join(_cell(text) for text in (e.source, e.reference, e.translation)) + " |"
        for e in stage.examples
    ]


def _files_lines(result: QuickstartResult, out: Path) -> list[str]:
    lines = ["## Saved models (reloaded with the Auto classes)", ""]
    for name, check in result.reload.items():
        lines.append(f"- `{name}`: {check.model_class}, " + ", ".join(f"{k} {v}" for k, v in check.checks.items()))
    lines += ["", "## Plots", ""]
    pldr, agf = result.pldrllm, result.agf
    for name, path in {**pldr.plots, **{f"agf_{k}": v for k, v in agf.plots.items()}}.items():
        lines.append(f"- {name}: `{Path(path).relative_to(out)}`")
    for name, reason in {**pldr.plots_skipped, **{f"agf_{k}": v for k, v in agf.plots_skipped.items()}}.items():
        lines.append(f"- {name}: not plotted, {reason}")
    return lines


def write_summary(out: Path, result: QuickstartResult) -> Path:
    """`summary.md` in `out`: the headline, each stage's section, the saved models and the plots."""
    lines = [
        *_headline(result),
        *_pldr_lines(result.pldrllm),
        "",
        *_agf_lines(result.agf),
        "",
        *_files_lines(result, out),
    ]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
