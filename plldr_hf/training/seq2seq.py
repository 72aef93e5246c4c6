"""Translation training and evaluation with `Seq2SeqTrainer` for the AGF model family.

Pipeline of `train_translation`: load a corpus (`corpus.load_translation_dataset`) → train or reuse a joint subword
tokenizer (saved in the output folder, and with every checkpoint) → tokenise → build an
`AgfForConditionalGeneration` of a named size and position encoding → `TranslationTrainer.train` → save model,
tokenizer and generation config together → score the test sets with `evaluate_translation`.

Recipe (Transformer-base, Vaswani et al., arXiv 1706.03762, §5.3–5.4): Adam (β₂ 0.98, ε 1e-9), inverse-square-root schedule after a linear warm-up, label
smoothing 0.1 computed in the model's forward (the model consumes `num_items_in_batch`, so gradient accumulation and
DDP stay exact), greedy decoding during training evaluation and beam search for the final
scores.

Metrics, on every evaluation:

- `accuracy`: teacher-forced token accuracy over non-pad target tokens (the "accuracy" of arXiv 2603.04805);
- `bleu`, `chrf`: detokenised sacrebleu corpus scores of generated translations (`plldr_hf.evaluation`). During
  training the references are the decoded (truncated) label ids; `evaluate_translation` scores against the raw
  reference strings and reports sacrebleu's signatures.

Runs unchanged under `torchrun` / `accelerate launch`: data and tokenizer are prepared on the main process first
(`main_process_first`), everything else is Trainer's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    GenerationConfig,
    PreTrainedTokenizerBase,
    Seq2SeqTrainingArguments,
    set_seed,
)

from plldr_hf.evaluation import token_accuracy_counts, translation_scores
from plldr_hf.loading import load_tokenizer
from plldr_hf.models.agf import AgfForConditionalGeneration
from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS
from plldr_hf.plots import loss_curves_skipped, plot_loss_curves
from plldr_hf.training.callbacks import StepTimerCallback, use_progress_bar
from plldr_hf.training.checkpoints import resolve_checkpoint
from plldr_hf.training.corpus import load_translation_dataset, take_subset
from plldr_hf.training.options import TranslationOptions
from plldr_hf.training.preprocessing import preprocess_translation
from plldr_hf.training.recipes import build_agf_config, seconds_per_step, translation_arguments_of
from plldr_hf.training.run import RunReport, collect_warnings
from plldr_hf.training.tokenizers import train_joint_tokenizer
from plldr_hf.training.translation_trainer import (
    IGNORE_INDEX,
    TranslationTrainer,
    build_compute_metrics,
    predictions_of,
)


logger = logging.getLogger(__name__)

__all__ = ["evaluate_translation", "format_scores", "train_translation"]


TOKENIZER_FILE = "tokenizer.json"


def reset_call_state(tokenizer) -> None:
    """A fast tokenizer keeps the truncation and padding of its last call in its backend (and writes them into
    `tokenizer.json`): whether preprocessing ran or came from the datasets cache would change the saved file, and
    the plain `tokenizers` library would then truncate every text. Saved tokenizers carry neither."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()


def _load_or_train_tokenizer(args, raw, tokenizer, vocab_size, tokenizer_model, langs):
    out = Path(args.output_dir)
    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return tokenizer
    if tokenizer is not None:
        return load_tokenizer(str(tokenizer))
    if (out / TOKENIZER_FILE).is_file():
        # a resumed or restarted run must keep the vocabulary its checkpoints were trained with
        logger.info("reusing the tokenizer saved in %s", out)
        return AutoTokenizer.from_pretrained(str(out))
    logger.info("training a %s tokenizer with %d tokens on %d pairs", tokenizer_model, vocab_size, len(raw["train"]))
    tok = train_joint_tokenizer(raw["train"], vocab_size, languages=langs, model=tokenizer_model, seed=args.seed)
    if args.process_index == 0:
        tok.save_pretrained(str(out))
    return tok


def train_translation(options: TranslationOptions, *, tokenizer=None, callbacks=()) -> RunReport:
    """Trains an AGF-family translation model with `Seq2SeqTrainer` and scores it on the test sets: the AGF
    family's pipeline behind `plldr_hf.training.run.train`.

    Args:
        options: every setting of the run (`plldr_hf.training.options.TranslationOptions`, e.g.
            `TranslationOptions.from_name("tiny", pcmv=True)`): data, tokenizer, model and training; the
            `Seq2SeqTrainingArguments` are `recipes.translation_arguments_of(options)`. Label smoothing belongs to
            the model (`options.label_smoothing`), so a `label_smoothing_factor` trainer argument is refused.
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
        report = _train_translation(options.resolved(), tokenizer, callbacks)
    report.warnings = list(warnings)
    if report.main_process:
        report.save()
    return report


def _train_translation(options: TranslationOptions, tokenizer, callbacks) -> RunReport:
    args = translation_arguments_of(options)
    dataset = options.dataset[0] if len(options.dataset) == 1 else options.dataset
    source_lang, target_lang = options.source_lang, options.target_lang
    max_source_length, max_target_length = options.max_source_length, options.max_target_length
    num_beams, length_penalty = options.num_beams, options.length_penalty
    tokenizer = tokenizer if tokenizer is not None else options.tokenizer
    if args.label_smoothing_factor:
        raise ValueError(
            f"label_smoothing_factor={args.label_smoothing_factor} would smooth the loss twice; set the model's "
            "label smoothing instead (--label-smoothing, TranslationOptions.label_smoothing: the model computes the "
            "smoothed loss)"
        )
    resume_from_checkpoint = resolve_checkpoint(options.resume, args.output_dir, "agf")
    from datasets import DatasetDict

    set_seed(args.seed)
    os.makedirs(args.output_dir, exist_ok=True)

    with args.main_process_first(desc="loading data and tokenizer"):
        raw = load_translation_dataset(dataset, source_lang, target_lang, wmt17_dir=options.wmt17_dir)
        raw["train"] = take_subset(raw["train"], options.max_train_samples)
        raw["validation"] = take_subset(raw["validation"], options.max_eval_samples)
        for split in raw:
            if split not in ("train", "validation"):
                raw[split] = take_subset(raw[split], options.max_test_samples)
        tok = _load_or_train_tokenizer(
            args, raw, tokenizer, options.vocab_size, options.tokenizer_model, (source_lang, target_lang)
        )
        # each split tokenised once: the training split drops the pairs that do not fit, the others are truncated
        tokenized = DatasetDict(
            {
                split: preprocess_translation(
                    data,
                    tok,
                    source_lang,
                    target_lang,
                    max_source_length=max_source_length,
                    max_target_length=max_target_length,
                    drop_long=split == "train",
                )
                for split, data in raw.items()
            }
        )
        logger.info(
            "training on %d of %d pairs (the others exceed %d / %d subwords)",
            len(tokenized["train"]),
            len(raw["train"]),
            max_source_length,
            max_target_length,
        )
    reset_call_state(tok)

    config = build_agf_config(
        tok,
        options.size,
        options.position_encoding,
        options.pcmv,
        label_smoothing=options.label_smoothing,
        **options.model_overrides,
    )
    model = AgfForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        num_beams=num_beams,
        length_penalty=length_penalty,
        # decoder length including the start token: at most as many tokens as a training target holds
        max_length=max_target_length + 1,
    )
    logger.info(
        "model: %s, %s%s%s, %.2fM parameters",
        options.size,
        options.position_encoding,
        " + PCM-V" if options.pcmv else "",
        " + absolute sinusoids" if config.absolute_positions else "",
        sum(p.numel() for p in model.parameters()) / 1e6,
    )

    timer = StepTimerCallback()
    trainer = TranslationTrainer(
        model=model,
        args=args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        processing_class=tok,
        data_collator=DataCollatorForSeq2Seq(
            tok, model=model, label_pad_token_id=IGNORE_INDEX, pad_to_multiple_of=8 if args.bf16 or args.fp16 else None
        ),
        compute_metrics=build_compute_metrics(tok),
        callbacks=[timer, *callbacks],
        bucket_by_length=options.bucket_by_length,
    )
    use_progress_bar(trainer, not args.disable_tqdm, desc="translator")
    train_output = trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    # Trainer wrote use_cache=False into the config for training (gradient checkpointing turns the cache off)
    model.config.use_cache = True
    reset_call_state(tok)
    trainer.save_model()
    # saved (train_results.json) and logged, not printed as a block: the command prints its own summary
    logger.info("train metrics: %s", train_output.metrics)
    trainer.save_metrics("train", train_output.metrics)
    trainer.save_state()

    history = trainer.state.log_history
    evaluations = [h for h in history if "eval_loss" in h]
    report = RunReport(
        family="agf",
        output_dir=str(args.output_dir),
        options=asdict(options),
        model_class=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        vocab_size=len(tok),
        global_step=trainer.state.global_step,
        max_steps=options.max_steps,
        train_examples=len(tokenized["train"]),
        eval_examples=len(tokenized["validation"]),
        train_metrics=train_output.metrics,
        eval_metrics=evaluations[-1] if evaluations else {},
        seconds_per_step=seconds_per_step(train_output.metrics, trainer.state.global_step),
        step_timing=timer.summary(),
        model=model,
        tokenizer=tok,
        log_history=history,
        datasets=raw,
        main_process=args.process_index == 0,
    )
    if report.main_process:
        report.loss_curves_skipped = loss_curves_skipped(history)
        curves = plot_loss_curves(history, Path(args.output_dir) / "loss_curves.png", _variant_label(options))
        report.loss_curves = str(curves) if curves else None
    for split in options.test_splits:
        if split not in raw:
            logger.info("no %s split in this dataset; not scored", split)
            continue
        scores = evaluate_translation(
            model,
            tok,
            raw[split],
            source_lang=source_lang,
            target_lang=target_lang,
            max_source_length=max_source_length,
            max_target_length=max_target_length,
            batch_size=args.per_device_eval_batch_size,
            num_beams=num_beams,
            bf16=args.bf16,
            tokenized=tokenized[split],
            desc=split,
            disable_tqdm=args.disable_tqdm,
        )
        report.scores[split] = scores
        if args.process_index == 0:
            _write_json(Path(args.output_dir) / f"{split}_results.json", scores)
            print(format_scores(scores, title=f"{split} ({len(raw[split])} segments)"))
    return report


def _variant_label(options: TranslationOptions) -> str:
    """The display name of the run's position handling (`POSITION_VARIANTS`), or the encoding's own name."""
    for label, fields in POSITION_VARIANTS.values():
        extra = {k: v for k, v in fields.items() if k not in ("position_encoding", "pcmv")}
        if (
            fields["position_encoding"] == options.position_encoding
            and fields.get("pcmv", False) == options.pcmv
            and all(options.model_overrides.get(k) == v for k, v in extra.items())
        ):
            return label
    return options.position_encoding + (" + PCM-V" if options.pcmv else "")


def _write_json(path: Path, scores: dict) -> None:
    payload = {k: v for k, v in scores.items() if k != "hypotheses"}
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def evaluate_translation(
    model,
    tokenizer: PreTrainedTokenizerBase,
    data,
    *,
    source_lang: str = "en",
    target_lang: str = "de",
    max_source_length: int = 128,
    max_target_length: int = 128,
    batch_size: int = 32,
    num_beams: int = 4,
    max_length: int | None = None,
    bf16: bool = False,
    tokenized=None,
    desc: str = "test",
    disable_tqdm: bool = False,
    generate: bool = True,
) -> dict[str, Any]:
    """Scores a model on one raw `translation` split: BLEU and chrF of its translations against the raw references,
    and teacher-forced token accuracy and cross-entropy on the tokenised references.

    Runs through `TranslationTrainer.predict`, so it batches, shows a progress bar and works under `torchrun`. The
    cross-entropy is evaluated without label smoothing.

    Args:
        model: an `AgfForConditionalGeneration` (any seq2seq model with `generate` works).
        tokenizer: its tokenizer.
        data: the raw split, a `translation` column with `source_lang` and `target_lang`.
        source_lang: source language key.
        target_lang: target language key; its raw strings are the BLEU / chrF references.
        max_source_length: source truncation.
        max_target_length: reference truncation for accuracy and loss.
        batch_size: evaluation batch size per device.
        num_beams: beam size.
        max_length: most generated target tokens (default: `max_target_length`).
        bf16: bf16 autocast.
        tokenized: `data` already passed through `preprocess_translation` (row order unchanged).
        desc: name of the split in logs and metric keys.
        disable_tqdm: no progress bar.
        generate: False skips decoding: only accuracy and loss (a teacher-forced pass, much cheaper).

    Returns:
        `{"bleu", "chrf", "bleu_signature", "chrf_signature", "accuracy", "wrong_source_accuracy", "source_gap",
        "loss", "perplexity", "segments", "target_tokens", "num_beams", "hypotheses"}` (without the BLEU / chrF entries and hypotheses when
        `generate=False`); `loss` is the token-level cross-entropy over all target tokens (batch-independent).
    """
    if len(data) == 0:
        raise ValueError(f"the {desc} split is empty")
    if tokenized is None:
        tokenized = preprocess_translation(
            data,
            tokenizer,
            source_lang,
            target_lang,
            max_source_length=max_source_length,
            max_target_length=max_target_length,
        )
    max_length = max_length or max_target_length
    smoothing = getattr(model.config, "label_smoothing", 0.0)
    model.config.label_smoothing = 0.0
    try:
        with tempfile.TemporaryDirectory(prefix="plldr_hf_eval_") as tmp:
            eval_args = Seq2SeqTrainingArguments(
                output_dir=tmp,
                per_device_eval_batch_size=batch_size,
                predict_with_generate=generate,
                report_to="none",
                bf16=bf16,
                disable_tqdm=disable_tqdm,
                use_cpu=not torch.cuda.is_available(),
            )
            trainer = TranslationTrainer(
                model=model,
                args=eval_args,
                processing_class=tokenizer,
                data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=IGNORE_INDEX),
            )
            output = trainer.predict(tokenized, metric_key_prefix=desc, max_length=max_length + 1, num_beams=num_beams)
            wrong = trainer.source_use(tokenized) if len(tokenized) > 1 else None
    finally:
        model.config.label_smoothing = smoothing
    generated, teacher_forced, row_nll = predictions_of(output.predictions)
    correct, total = token_accuracy_counts(teacher_forced, output.label_ids, IGNORE_INDEX)
    loss = float(np.sum(row_nll, dtype=np.float64) / max(total, 1))
    accuracy = correct / max(total, 1)
    result = {
        "accuracy": accuracy,
        # the source-use diagnostic (`wrong_source`): accuracy with every target paired with another row's source
        "wrong_source_accuracy": wrong,
        "source_gap": None if wrong is None else accuracy - wrong,
        "loss": loss,
        "perplexity": math.exp(min(loss, 50.0)),
        "segments": len(data),
        "target_tokens": total,
    }
    if not generate:
        return result
    pad = tokenizer.pad_token_id
    hypotheses = tokenizer.batch_decode(np.where(generated < 0, pad, generated), skip_special_tokens=True)
    references = [pair[target_lang] for pair in data["translation"]]
    scores = translation_scores(hypotheses, references)
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        **result,
        "bleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "num_beams": num_beams,
        "length_penalty": getattr(model.generation_config, "length_penalty", 1.0) if num_beams > 1 else None,
        "hypotheses": hypotheses,
    }


def format_scores(scores: dict[str, Any], title: str = "") -> str:
    """A small plain-text table of one `evaluate_translation` result, with the sacrebleu signatures."""
    rows = [
        ("BLEU", f"{scores['bleu']:.2f}", scores["bleu_signature"]),
        ("chrF", f"{scores['chrf']:.2f}", scores["chrf_signature"]),
        ("accuracy", f"{100 * scores['accuracy']:.2f}%", f"teacher-forced, {scores['target_tokens']} target tokens"),
        ("loss", f"{scores['loss']:.4f}", f"perplexity {scores['perplexity']:.2f}"),
    ]
    if scores.get("source_gap") is not None:
        rows.append(
            (
                "src gap",
                f"{100 * scores['source_gap']:.2f}",
                f"accuracy points lost with a wrong source ({100 * scores['wrong_source_accuracy']:.2f}%): how much "
                "the model uses its source",
            )
        )
    width = max(len(r[1]) for r in rows)
    lines = [title] if title else []
    lines += [f"  {name:<9} {value:>{width}}  {note}" for name, value, note in rows]
    return "\n".join(lines)
