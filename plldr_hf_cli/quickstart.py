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
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from plldr_hf.timing import decode_speeds, scoring_speeds
from plldr_hf_cli.quickstart_results import (
    AgfStage,
    DecodeSpeed,
    ExampleRule,
    PldrStage,
    QuickstartResult,
    ReloadCheck,
    Sample,
    ScoringSpeed,
    as_json,
    write_summary,
)


logger = logging.getLogger(__name__)

PLDR_PROMPTS = ["ROMEO:", "To be, or not to be", "My lord, the king", "What light through yonder"]
# the samples' settings (shown in the summary)
SAMPLING = dict(max_new_tokens=40, top_p=0.9, temperature=0.8)
# greedy decoding from a random prompt of PROMPT_TOKENS, and scoring forwards over SCORING_BATCH (rows, tokens): the
# medians of this many interleaved rounds
PROMPT_TOKENS, DECODE_ROUNDS = 32, 5
SCORING_BATCH, SCORING_ROUNDS = (16, 64), 7
# the translations shown next to their references
EXAMPLES = ExampleRule(count=4, words=(4, 12))


# the two plans, field by field
PLANS = {
    # the main job: about 7 minutes on an idle 2-core CPU (`QUICKSTART_MINUTES`). The AGF recipe is the one of `plldr-hf train agf --size
    # small --vocab-size 4000 --learning-rate 0.002 --warmup-steps 200`, with length-bucketed batches
    "default": dict(
        pldr_size="mini",
        pldr_steps=400,
        pldr_block_size=128,
        pldr_batch_size=8,
        pldr_vocab=2048,
        agf_size="small",
        agf_steps=3000,
        agf_train_samples=None,
        agf_test_samples=300,
        agf_vocab=4000,
        agf_max_length=64,
        agf_learning_rate=2e-3,
        agf_warmup_steps=200,
        agf_beams=4,
        decode_new_tokens=48,
        reference_minutes=7.0,  # the README's and the help's number (tests/test_readme.py keeps them equal)
    ),
    # the smoke test: tiny models and a few dozen steps each, well under a minute
    "tiny": dict(
        pldr_size="tiny",
        pldr_steps=40,
        pldr_block_size=64,
        pldr_batch_size=8,
        pldr_vocab=512,
        agf_size="tiny",
        agf_steps=60,
        agf_train_samples=2000,
        agf_test_samples=60,
        agf_vocab=1000,
        agf_max_length=32,
        agf_learning_rate=3e-3,
        agf_warmup_steps=10,
        agf_beams=1,
        decode_new_tokens=16,
        reference_minutes=0.5,
    ),
}


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
        """`"default"`: the main job (about 7 minutes on an idle 2-core CPU); `"tiny"`: tiny models and a few dozen
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


def run_pldrllm(plan: QuickstartPlan, out: Path, deadline: Deadline) -> PldrStage:
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
        per_device_train_batch_size=plan.pldr_batch_size,
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
        disable_tqdm=not plan.progress,
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
        collapse_report, refused = collapsed.collapse(), None
    except ValueError as error:
        collapse_report, refused = collapsed.collapse(force=True), str(error)
    collapsed_dir = out / "pldrllm-collapsed"
    collapsed.save_pretrained(collapsed_dir)
    tokenizer.save_pretrained(collapsed_dir)
    (collapsed_dir / "collapse_report.json").write_text(json.dumps(collapse_report.to_dict(), indent=2))

    step("samples, then greedy-decoding and scoring speed (interleaved rounds)")
    samples = []
    for text in PLDR_PROMPTS[:3]:
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            generated = model.generate(ids, do_sample=True, **SAMPLING)
        samples.append(Sample(text, tokenizer.decode(generated[0], skip_special_tokens=True)))

    prompt = torch.randint(6, len(tokenizer), (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    decode = decode_speeds(
        {"uncollapsed_kv_g_cache_tok_s": model, "collapsed_tok_s": collapsed},
        prompt,
        plan.decode_new_tokens,
        rounds=DECODE_ROUNDS,
    )
    # where collapse pays: a forward over whole sequences runs the metric learner once per layer and batch row
    # (decoding reuses the G cache, so there it costs the same either way)
    batch = torch.randint(6, len(tokenizer), SCORING_BATCH, generator=torch.Generator().manual_seed(1))
    scoring = scoring_speeds({"uncollapsed_tok_s": model, "collapsed_tok_s": collapsed}, batch, rounds=SCORING_ROUNDS)
    plots = {"order_parameter": run_dir / "diagnostics" / "order_parameter.png"}
    plots["singular_values"] = run_dir / "diagnostics" / "singular_values_A.png"
    if report.loss_curves:
        plots = {"loss_curves": report.loss_curves, **plots}
    return PldrStage(
        run=report,
        collapsed_dir=str(collapsed_dir),
        order_parameter_prompts=dict(diagnostics.order_parameter_inputs),
        order_parameter_per_layer=dict(diagnostics.order_parameter_inputs_per_layer),
        collapse=collapse_report,
        collapse_refused=refused,
        samples=samples,
        sample_settings={k: v for k, v in SAMPLING.items() if k != "max_new_tokens"},
        decode_speed=DecodeSpeed(
            **decode, prompt_tokens=PROMPT_TOKENS, new_tokens=plan.decode_new_tokens, rounds=DECODE_ROUNDS
        ),
        scoring_speed=ScoringSpeed(
            **scoring, batch_size=SCORING_BATCH[0], sequence_length=SCORING_BATCH[1], rounds=SCORING_ROUNDS
        ),
        stopped_by_time_budget=any(b.stopped_early for b in budget),
        plots={name: str(path) for name, path in plots.items()},
        plots_skipped={"loss_curves": report.loss_curves_skipped} if report.loss_curves_skipped else {},
    )


def run_agf(plan: QuickstartPlan, out: Path, deadline: Deadline) -> AgfStage:
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
        test_splits=["test"],
        num_beams=plan.agf_beams,
        output_dir=str(run_dir),
        max_steps=plan.agf_steps,
        warmup_steps=plan.agf_warmup_steps,
        learning_rate=plan.agf_learning_rate,
        per_device_train_batch_size=32,
        eval_steps=eval_steps,
        save_steps=plan.agf_steps,
        logging_steps=max(1, plan.agf_steps // 30),
        # the validation curve: teacher-forced loss and accuracy (decoding is left to the final test scoring)
        predict_with_generate=False,
        save_total_limit=1,
        disable_tqdm=not plan.progress,
    )
    run = train(options, callbacks=budget)
    plots, skipped = {}, {}
    if run.loss_curves:
        plots["loss_curves"] = run.loss_curves
    else:
        skipped["loss_curves"] = run.loss_curves_skipped
    if position_encoding == "agf":
        plots["agf_coefficients"] = str(plot_coefficient_curves(run.model, run_dir / "agf_coefficients.png"))
    return AgfStage(
        run=run,
        translator=label,
        translator_variant=plan.translator,
        position_config=fields,
        coefficient_change=coefficient_change(run.model),
        example_rule=EXAMPLES,
        examples=EXAMPLES.pick(run.datasets["test"], run.scores["test"]["hypotheses"]),
        stopped_by_time_budget=any(b.stopped_early for b in budget),
        plots=plots,
        plots_skipped=skipped,
    )


def check_reload(pldrllm: PldrStage, agf: AgfStage) -> dict[str, ReloadCheck]:
    """Reload every saved model with the Auto classes (no trust_remote_code): the PLDR-LLMs twice, with equal
    logits on a fixed input; the translator generates."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    checks = {}
    for name, folder in (("pldrllm", pldrllm.run.output_dir), ("pldrllm-collapsed", pldrllm.collapsed_dir)):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        ids = tokenizer(PLDR_PROMPTS[0], add_special_tokens=False, return_tensors="pt")["input_ids"]
        first, second = (AutoModelForCausalLM.from_pretrained(folder).eval() for _ in range(2))
        with torch.no_grad():
            identical = bool(torch.equal(first(ids).logits, second(ids).logits))
        checks[name] = ReloadCheck(
            type(first).__name__, {"identical": identical, "collapsed": bool(first.config.collapsed)}
        )
    folder = agf.run.output_dir
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = tokenizer(["Click the button."], return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=8, do_sample=False)
    checks["agf"] = ReloadCheck(type(model).__name__, {"generates": generated.shape[1] > 1})
    return checks


def run_quickstart(
    output_dir: str | Path = "runs/quickstart",
    plan: QuickstartPlan | None = None,
    translator: str | None = None,
) -> QuickstartResult:
    """Run `plan` (default `QuickstartPlan.named("default")`) into `output_dir`; returns the typed result
    (`metrics.json` holds it as JSON, `summary.md` as text).

    The run sets the plan's thread count and gives the process its own back afterwards (a quickstart called
    in-process, by a test or a notebook, must not change the float rounding of what runs after it)."""
    threads = torch.get_num_threads()
    try:
        return _run_quickstart(output_dir, plan, translator)
    finally:
        torch.set_num_threads(threads)


def _run_quickstart(output_dir, plan, translator) -> QuickstartResult:
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
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        # set by the command line on a busy machine (`wait_threads_passively_when_busy`): no change in arithmetic
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
    }
    deadline = Deadline(plan.minutes * 60 if plan.minutes is not None else None)
    print(plan.describe(), flush=True)
    print(f"[1/3] PLDR-LLM ({plan.pldr_size}, {plan.pldr_steps} steps) on the embedded Shakespeare corpus", flush=True)
    pldrllm = run_pldrllm(plan, out, deadline)
    left = f"; {max(0.0, deadline.left()) / 60:.1f} min of the budget left" if plan.minutes is not None else ""
    print(
        f"[2/3] {POSITION_VARIANTS[plan.translator][0]} translator ({plan.agf_size}, {plan.agf_steps} steps) on the "
        f"embedded en-de pairs{left}",
        flush=True,
    )
    agf = run_agf(plan, out, deadline)
    print("[3/3] reloading the saved models with the Auto classes", flush=True)
    reload = check_reload(pldrllm, agf)
    result = QuickstartResult(plan, versions, pldrllm, agf, reload, (time.perf_counter() - start) / 60)
    (out / "metrics.json").write_text(json.dumps(as_json(result), indent=2, default=str), encoding="utf-8")
    summary = write_summary(out, result)
    print(summary.read_text(encoding="utf-8"), end="")
    for warning in result.warnings:
        print(f"plldr-hf quickstart: WARNING: {warning}", file=sys.stderr)
    return result
