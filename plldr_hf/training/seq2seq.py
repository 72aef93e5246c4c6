"""The AGF family's training pipeline, in the shape of transformers' `run_translation.py`: options → starting point →
data → model → `TranslationTrainer` → test scores → `RunReport`, read top to bottom in `train_translation` (behind
`plldr_hf.training.run.train`).

| step | where |
|---|---|
| start: the checkpoint to resume (checked, with the run's settings and data), `--init-from`, LoRA | `start.starting_point` |
| data: splits, joint tokenizer, tokenised pairs | `translation_data` below (`corpus`, `tokenizers`, `preprocessing`) |
| model: `AgfForConditionalGeneration` of the recipe's config | `recipes.agf_config` |
| trainer: length buckets, metrics, the source-use diagnostic | `translation_trainer.TranslationTrainer` |
| timing, progress | `callbacks.add_run_callbacks` |
| test scores, `<split>_results.json` | `translation_trainer.evaluate_translation` |
| report, `loss_curves.png` | `report.RunReport`, `plots` |

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

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import DataCollatorForSeq2Seq, GenerationConfig, set_seed

from plldr_hf.models.agf import AgfForConditionalGeneration
from plldr_hf.models.agf.position_encodings import variant_label
from plldr_hf.plots import loss_curves_skipped, plot_loss_curves
from plldr_hf.training.callbacks import add_run_callbacks
from plldr_hf.training.corpus import load_translation_dataset, take_subset
from plldr_hf.training.options import TranslationOptions
from plldr_hf.training.recipes import agf_config, seconds_per_step
from plldr_hf.training.report import RunReport, collect_warnings, run_settings
from plldr_hf.training.start import starting_point
from plldr_hf.training.translation_trainer import (
    IGNORE_INDEX,
    TranslationTrainer,
    build_compute_metrics,
    evaluate_translation,
    format_scores,
)


logger = logging.getLogger(__name__)

__all__ = ["TranslationData", "train_translation", "translation_data"]


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
        config = agf_config(
            options.size, options.position_encoding, options.pcmv, options.label_smoothing, **options.model_overrides
        )
        start = starting_point(options, tokenizer)
        out = Path(options.output_dir)
        is_main = options.process_index == 0
        set_seed(options.seed)
        with options.main_process_first(desc="loading data and tokenizer"):
            data = translation_data(options, start.tokenizer)

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
        if start.lora is not None:
            from peft import get_peft_model

            model = get_peft_model(model, start.lora)
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
        installed = add_run_callbacks(trainer, progress=not options.disable_tqdm, desc="translator")
        train_output = trainer.train(resume_from_checkpoint=start.checkpoint)
        # the test scores (BLEU, chrF against the raw references, token accuracy, loss) of every split but train and
        # validation, or of `test_splits` (the embedded GNOME pairs only with --gnome-test, which adds them to the data)
        wanted = options.test_splits
        if wanted is None:
            wanted = [split for split in data.raw if split not in ("train", "validation")]
        missing = [split for split in wanted if split not in data.raw]
        if missing:
            logger.info("no %s split in this dataset; not scored", ", ".join(missing))
        scores = {}
        for split in [split for split in wanted if split in data.raw]:
            scores[split] = evaluate_translation(
                trainer.model,
                data.tokenizer,
                data.raw[split],
                tokenized=data.tokenized[split],
                desc=split,
                batch_size=options.per_device_eval_batch_size,
                bf16=options.bf16,
                disable_tqdm=options.disable_tqdm,
                source_lang=options.source_lang,
                target_lang=options.target_lang,
                max_source_length=options.max_source_length,
                max_target_length=options.max_target_length,
                num_beams=options.num_beams,
            )
            if is_main:
                saved = {k: v for k, v in scores[split].items() if k != "hypotheses"}
                path = out / f"{split}_results.json"
                path.write_text(json.dumps(saved, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
                print(format_scores(scores[split], title=f"{split} ({len(data.raw[split])} segments)"))
        # every Trainer writes its args.use_cache (False) into the model's config; the saved model decodes with the cache
        trainer.model.config.use_cache = True
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
        trainer.save_metrics("train", metrics)
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
            train_metrics=metrics,
            eval_metrics=evaluations[-1] if evaluations else {},
            scores=scores,
            seconds_per_step=seconds_per_step(metrics, trainer.state.global_step),
            step_timing=installed.timer.summary(),
            model=model,
            tokenizer=data.tokenizer,
            log_history=history,
            datasets=data.raw,
            main_process=is_main,
        )
        if is_main:
            report.loss_curves_skipped = loss_curves_skipped(history)
            curves = plot_loss_curves(history, out / "loss_curves.png", label)
            report.loss_curves = str(curves) if curves else None
    report.warnings = list(warnings)
    if report.main_process:
        report.save()
    return report


@dataclass
class TranslationData:
    """What an AGF translation run trains and is scored on: its joint tokenizer, the model config fields it decides
    (`translation_token_fields`), the raw splits (the references of the test scores) and the tokenised ones (the
    training split without the pairs that do not fit)."""

    tokenizer: Any
    model_fields: dict
    raw: Any
    tokenized: Any


def translation_data(options: TranslationOptions, tokenizer=None) -> TranslationData:
    """The data of an AGF translation run (`TranslationOptions`, its training arguments too): the splits
    (`load_translation_dataset`, subsets of the sizes asked for), the joint tokenizer (given, saved in the output
    folder by an earlier start of the run, or trained on the training split: `train_joint_tokenizer`, saved by the
    main process) and the tokenised splits (`preprocess_translation`: the training split drops the pairs that do not
    fit, the others are truncated). `tokenizer`: the run's starting point's (`options.tokenizer`, or the
    `init_from` model's), if any."""
    from datasets import DatasetDict
    from transformers import AutoTokenizer

    from plldr_hf.training.preprocessing import preprocess_translation
    from plldr_hf.training.tokenizers import train_joint_tokenizer, translation_token_fields

    dataset = options.dataset[0] if len(options.dataset) == 1 else options.dataset
    source, target = options.source_lang, options.target_lang
    raw = load_translation_dataset(
        dataset, source, target, wmt17_dir=options.wmt17_dir, out_of_domain_test=options.out_of_domain_test
    )
    raw["train"] = take_subset(raw["train"], options.max_train_samples)
    raw["validation"] = take_subset(raw["validation"], options.max_eval_samples)
    for split in raw:
        if split not in ("train", "validation"):
            raw[split] = take_subset(raw[split], options.max_test_samples)
    out = Path(options.output_dir)
    if tokenizer is not None:
        pass
    elif (out / "tokenizer.json").is_file():
        # a resumed or restarted run must keep the vocabulary its checkpoints were trained with
        logger.info("reusing the tokenizer saved in %s", out)
        tokenizer = AutoTokenizer.from_pretrained(str(out))
    else:
        logger.info(
            "training a %s tokenizer with %d tokens on %d pairs",
            options.tokenizer_model,
            options.vocab_size,
            len(raw["train"]),
        )
        tokenizer = train_joint_tokenizer(
            raw["train"],
            options.vocab_size,
            languages=(source, target),
            model=options.tokenizer_model,
            seed=options.seed,
        )
        if options.process_index == 0:
            tokenizer.save_pretrained(str(out))
    model_fields = translation_token_fields(tokenizer)
    tokenized = DatasetDict(
        {
            split: preprocess_translation(
                data,
                tokenizer,
                source,
                target,
                max_source_length=options.max_source_length,
                max_target_length=options.max_target_length,
                drop_long=split == "train",
            )
            for split, data in raw.items()
        }
    )
    logger.info(
        "training on %d of %d pairs (the others exceed %d / %d subwords)",
        len(tokenized["train"]),
        len(raw["train"]),
        options.max_source_length,
        options.max_target_length,
    )
    return TranslationData(tokenizer, model_fields, raw, tokenized)
