"""The AGF family's training pipeline: options → recipe → data → model → `TranslationTrainer` → `RunReport`.

`train_translation(options)` is the family's `train` entry point (`plldr_hf.training.run.train` calls it). Each step
is one call into the module that owns it, in this order, so a run's options pass through each module once:

| step | function | module |
|---|---|---|
| model config (the options are the `Seq2SeqTrainingArguments`) | `agf_config` | `training/recipes.py` |
| resume | `resolve_checkpoint` | `training/checkpoints.py` |
| start: an existing model (`--init-from`, LoRA) or none, the given tokenizer | `starting_point` | `training/start.py` |
| data: splits, joint tokenizer, tokenised pairs | `prepare_translation_data` | `training/run_data.py` |
| model | `AgfForConditionalGeneration` | `models/agf/` |
| trainer | `TranslationTrainer` | `training/translation_trainer.py` |
| timing, progress, test scores at the end | `add_run_callbacks`, `TestScoresCallback` | `training/callbacks.py` |
| report | `RunReport`, `loss_curves.png` | `training/run.py`, `plots.py` |

Recipe (Transformer-base, Vaswani et al., arXiv 1706.03762, §5.3–5.4): Adam (β₂ 0.98, ε 1e-9), inverse-square-root
schedule after a linear warm-up, label smoothing 0.1 computed in the model's forward (the model consumes
`num_items_in_batch`, so gradient accumulation and DDP stay exact), greedy decoding during training evaluation and
beam search for the final scores.

Metrics, on every evaluation:

- `accuracy`: teacher-forced token accuracy over non-pad target tokens (the "accuracy" of arXiv 2603.04805);
- `bleu`, `chrf`: detokenised sacrebleu corpus scores of generated translations (`plldr_hf.evaluation`). During
  training the references are the decoded (truncated) label ids; the test scores (`evaluate_translation`) are
  against the raw reference strings, with sacrebleu's signatures.

Runs unchanged under `torchrun` / `accelerate launch`: data and tokenizer are prepared on the main process first
(`main_process_first`), everything else is Trainer's.
"""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import (
    DataCollatorForSeq2Seq,
    GenerationConfig,
    set_seed,
)

from plldr_hf.models.agf import AgfForConditionalGeneration
from plldr_hf.models.agf.position_encodings import variant_label
from plldr_hf.plots import loss_curves_skipped, plot_loss_curves
from plldr_hf.training.callbacks import TestScoresCallback, add_run_callbacks
from plldr_hf.training.checkpoints import check_data_unchanged, resolve_checkpoint, train_from
from plldr_hf.training.options import TranslationOptions
from plldr_hf.training.recipes import agf_config, seconds_per_step
from plldr_hf.training.report import RunReport, collect_warnings, run_settings
from plldr_hf.training.run_data import prepare_translation_data
from plldr_hf.training.start import starting_point, with_lora
from plldr_hf.training.translation_trainer import (
    IGNORE_INDEX,
    TranslationTrainer,
    build_compute_metrics,
)


logger = logging.getLogger(__name__)

__all__ = ["train_translation"]


TOKENIZER_FILE = "tokenizer.json"


def train_translation(options: TranslationOptions, *, tokenizer=None, callbacks=()) -> RunReport:
    """Trains an AGF-family translation model with `Seq2SeqTrainer` and scores it on the test sets: the AGF
    family's pipeline behind `plldr_hf.training.run.train`.

    Args:
        options: every setting of the run (`plldr_hf.training.options.TranslationOptions`, e.g.
            `TranslationOptions.from_name("tiny", pcmv=True)`): data, tokenizer, model and training.
        tokenizer: an existing tokenizer object (else `options.tokenizer`, a folder; else one is trained on the
            training split, or the one already saved in the output folder is reused).
        callbacks: extra `TrainerCallback`s.

    Pairs that do not fit `max_source_length` / `max_target_length` whole are left out of training (evaluation and
    test splits are truncated, never filtered); training batches are length-bucketed (`LengthBucketSampler`)
    unless `bucket_by_length` is off.

    Returns:
        The `RunReport`: `scores` holds one entry per test split; the model, tokenizer, generation config,
        `train_report.json`, `train_results.json`, `loss_curves.png` and `<split>_results.json` (scores with
        sacrebleu signatures) are saved in the output folder.
    """
    with collect_warnings() as warnings:
        report = _train_translation(options, tokenizer, callbacks)
    report.warnings = list(warnings)
    if report.main_process:
        report.save()
    return report


def _train_translation(options: TranslationOptions, tokenizer, callbacks) -> RunReport:
    config = agf_config(
        options.size, options.position_encoding, options.pcmv, options.label_smoothing, **options.model_overrides
    )
    checkpoint = resolve_checkpoint(options.resume_from_checkpoint, options.output_dir, "agf")
    start = starting_point(options, tokenizer)
    set_seed(options.seed)
    out = Path(options.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_data_unchanged(out, options, resuming=checkpoint is not None, is_main=options.process_index == 0)
    with options.main_process_first(desc="loading data and tokenizer"):
        data = prepare_translation_data(options, start.tokenizer)

    if start.model is not None:
        model = start.model
        config = model.config
    else:
        # the model is sized to the tokenizer and decodes from its <s>
        config.update(data.model_fields)
        model = AgfForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        num_beams=options.num_beams,
        length_penalty=options.length_penalty,
        # decoder length including the start token: at most as many tokens as a training target holds
        max_length=options.max_target_length + 1,
    )
    label = variant_label(config.position_encoding, config.pcmv, config.to_dict())
    logger.info(
        "model: %s, %s, %.2fM parameters", options.init_from or options.size, label, model.num_parameters() / 1e6
    )
    model = with_lora(model, start)
    trainer = TranslationTrainer(
        model=model,
        args=options,
        train_dataset=data.tokenized["train"],
        eval_dataset=data.tokenized["validation"],
        processing_class=data.tokenizer,
        data_collator=DataCollatorForSeq2Seq(
            data.tokenizer,
            model=model,
            label_pad_token_id=IGNORE_INDEX,
            pad_to_multiple_of=8 if options.bf16 or options.fp16 else None,
        ),
        compute_metrics=build_compute_metrics(data.tokenizer),
        callbacks=list(callbacks),
        bucket_by_length=options.bucket_by_length,
    )
    # the user's splits (and the embedded GNOME pairs only with --gnome-test, which adds them to the data)
    wanted = options.test_splits
    if wanted is None:
        wanted = tuple(split for split in data.raw if split not in ("train", "validation"))
    missing = [split for split in wanted if split not in data.raw]
    if missing:
        logger.info("no %s split in this dataset; not scored", ", ".join(missing))
    test_splits = {s: (data.raw[s], data.tokenized[s]) for s in wanted if s in data.raw}
    installed = add_run_callbacks(
        trainer,
        progress=not options.disable_tqdm,
        desc="translator",
        test_scores=TestScoresCallback(
            test_splits,
            out,
            source_lang=options.source_lang,
            target_lang=options.target_lang,
            max_source_length=options.max_source_length,
            max_target_length=options.max_target_length,
            num_beams=options.num_beams,
        ),
    )
    train_output = train_from(trainer, checkpoint)
    # Trainer keeps use_cache=False in the config after training (its gradient-checkpointing guard); the saved model
    # decodes with the cache
    model.config.use_cache = True
    if start.lora is not None:
        # the adapters beside the model they were merged into: the output folder loads as a plain model
        trainer.model.save_pretrained(out / "adapter")
        model = trainer.model = trainer.model.merge_and_unload()
    trainer.save_model()
    # saved whole (train_results.json); the log gets one readable line
    metrics = train_output.metrics
    logger.info(
        "trained %d steps in %.0f s, training loss %.4g",
        trainer.state.global_step,
        metrics.get("train_runtime", float("nan")),
        metrics.get("train_loss", float("nan")),
    )
    trainer.save_metrics("train", train_output.metrics)
    trainer.save_state()

    history = trainer.state.log_history
    evaluations = [h for h in history if "eval_loss" in h]
    report = RunReport(
        family="agf",
        output_dir=str(out),
        options=run_settings(options),
        model_class=type(model).__name__,
        parameters=model.num_parameters(),
        vocab_size=len(data.tokenizer),
        global_step=trainer.state.global_step,
        max_steps=options.max_steps,
        train_examples=len(data.tokenized["train"]),
        eval_examples=len(data.tokenized["validation"]),
        train_metrics=train_output.metrics,
        eval_metrics=evaluations[-1] if evaluations else {},
        scores=installed.test_scores.scores,
        seconds_per_step=seconds_per_step(train_output.metrics, trainer.state.global_step),
        step_timing=installed.timer.summary(),
        model=model,
        tokenizer=data.tokenizer,
        log_history=history,
        datasets=data.raw,
        main_process=options.process_index == 0,
    )
    if report.main_process:
        report.loss_curves_skipped = loss_curves_skipped(history)
        curves = plot_loss_curves(history, out / "loss_curves.png", label)
        report.loss_curves = str(curves) if curves else None
    return report
