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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    GenerationConfig,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from plldr_hf.evaluation import token_accuracy_counts, translation_scores
from plldr_hf.loading import load_tokenizer
from plldr_hf.models.agf import AgfForConditionalGeneration
from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS
from plldr_hf.training.callbacks import use_progress_bar
from plldr_hf.training.checkpoints import resolve_checkpoint
from plldr_hf.training.corpus import load_translation_dataset, take_subset
from plldr_hf.training.options import TranslationOptions
from plldr_hf.training.preprocessing import preprocess_translation
from plldr_hf.training.recipes import build_agf_config, translation_arguments_of, translation_training_arguments
from plldr_hf.training.tokenizers import train_joint_tokenizer


logger = logging.getLogger(__name__)

__all__ = [
    "POSITION_VARIANTS",
    "TranslationOptions",
    "LengthBucketSampler",
    "TranslationTrainer",
    "TranslationRun",
    "build_agf_config",
    "build_compute_metrics",
    "evaluate_translation",
    "format_scores",
    "train_translation",
    "translation_training_arguments",
    "wrong_source",
]


TOKENIZER_FILE = "tokenizer.json"
IGNORE_INDEX = -100


def _split_logits(logits):
    return logits[0] if isinstance(logits, (tuple, list)) else logits


def _teacher_forced(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax ids (-100 where the label is ignored) `(B, S)` and the summed token NLL of each row `(B, 1)`, fp32.

    Per-row sums let the evaluation divide by the total number of target tokens at the end, so the loss does not
    depend on how segments were batched (Trainer's own eval loss averages per-batch means).
    """
    ignored = labels == IGNORE_INDEX
    ids = logits.argmax(-1).masked_fill(ignored, IGNORE_INDEX)
    nll = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=IGNORE_INDEX, reduction="none")
    return ids, nll.sum(-1, keepdim=True)


def _preprocess_logits(logits, labels):
    """`preprocess_logits_for_metrics`: (argmax ids, row NLL) instead of (B, S, V) logits; generated ids pass."""
    if isinstance(logits, (tuple, list)) and not torch.is_floating_point(logits[0]):
        return logits
    return _teacher_forced(_split_logits(logits), labels)


def wrong_source(tokenized):
    """The same targets, each paired with the source of the row `len // 2` places further on (cyclically).

    Teacher-forced accuracy on these pairs measures what the decoder gets right from the target prefix alone; the
    gap to the accuracy with the true sources measures how much the model uses its source (a decoder that ignores
    the source has a gap of 0)."""
    n = len(tokenized)
    if n < 2:
        raise ValueError("a wrong-source pairing needs at least 2 rows")
    order = [(i + n // 2) % n for i in range(n)]
    sources = tokenized.select(order)
    paired = tokenized.remove_columns([c for c in ("input_ids", "attention_mask") if c in tokenized.column_names])
    for column in ("input_ids", "attention_mask"):
        if column in sources.column_names:
            paired = paired.add_column(column, sources[column])
    return paired


def _unpack(predictions) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(generated ids or None, teacher-forced ids, row NLL) from either kind of `TranslationTrainer` predictions."""
    if len(predictions) == 3:
        return predictions
    return None, predictions[0], predictions[1]


def _pad_to(tensor: torch.Tensor, width: int, value: int) -> torch.Tensor:
    if tensor.shape[-1] >= width:
        return tensor
    return F.pad(tensor, (0, width - tensor.shape[-1]), value=value)


class LengthBucketSampler(LengthGroupedSampler):
    """Batches of similar length, the batches in random order (fairseq-style bucketing).

    Padding a random batch to its longest pair costs 2–3× the compute of the real tokens on the embedded corpus.
    transformers' `LengthGroupedSampler` (`train_sampling_strategy="group_by_length"`) fixes that but serves each
    mega-batch of 50 batches from longest to shortest, a saw-tooth curriculum: the model repeatedly ends a stretch on
    one-word batches, and a small translator trained that way learns to emit one frequent word (measured on the
    embedded pairs, 600 steps: token accuracy 8.5 % vs 20–23 % with random batch order). Here the same length-sorted
    batches are shuffled as whole batches, so every stretch of training sees all lengths.
    """

    def __iter__(self):
        indices = get_length_grouped_indices(self.lengths, self.batch_size, generator=self.generator)
        batches = [indices[i : i + self.batch_size] for i in range(0, len(indices), self.batch_size)]
        # only the last mega-batch can end in a short batch; it stays last, so the DataLoader's cuts of
        # `batch_size` fall on the bucket boundaries
        full = len(batches) - (len(batches[-1]) < self.batch_size if batches else 0)
        order = torch.randperm(full, generator=self.generator).tolist() + list(range(full, len(batches)))
        return iter([index for b in order for index in batches[b]])


def pair_lengths(dataset) -> list[int]:
    """Longer side (source or target, in subwords) of every tokenised pair: the cost that padding follows."""
    return [max(len(s), len(t)) for s, t in zip(dataset["input_ids"], dataset["labels"])]


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` whose predictions always carry what the token accuracy and an exact loss need.

    With `predict_with_generate`, `Seq2SeqTrainer` returns generated ids and drops the logits, so the token accuracy
    would be lost. Here predictions are `(generated_ids, teacher_forced_ids, row_nll)`, and labels come back padded
    with -100 (the base class pads them with the pad id, which would count padding as targets); ids and labels are
    padded to one width, so they stay aligned through Trainer's cross-batch and cross-process concatenation.
    `teacher_forced_ids` is -100 wherever the label is ignored; `row_nll` `(B, 1)` is each segment's summed token
    cross-entropy. Without `predict_with_generate` the predictions are `(teacher_forced_ids, row_nll)`.

    `bucket_by_length=True` draws training batches with `LengthBucketSampler` (similar lengths, random batch order).
    """

    def __init__(self, *args, bucket_by_length: bool = False, **kwargs):
        kwargs.setdefault("preprocess_logits_for_metrics", _preprocess_logits)
        self.bucket_by_length = bucket_by_length
        super().__init__(*args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if not self.bucket_by_length or not hasattr(dataset, "column_names"):
            return super()._get_train_sampler(train_dataset)
        return LengthBucketSampler(
            self.args.train_batch_size * self.args.gradient_accumulation_steps, lengths=pair_lengths(dataset)
        )

    def source_use(self, dataset) -> float:
        """Teacher-forced token accuracy of the model on `wrong_source(dataset)` (no generation, no callbacks);
        counts are summed over processes."""
        model = self.model
        was_training = model.training
        model.eval()
        counts = torch.zeros(2, dtype=torch.long, device=self.args.device)
        try:
            for inputs in self.get_eval_dataloader(wrong_source(dataset)):
                inputs = self._prepare_inputs(inputs)
                with torch.no_grad(), self.compute_loss_context_manager():
                    logits = _split_logits(model(**inputs).logits)
                ids, _ = _teacher_forced(logits, inputs["labels"])
                real = inputs["labels"] != IGNORE_INDEX
                counts += torch.stack([(ids == inputs["labels"])[real].sum(), real.sum()])
        finally:
            model.train(was_training)
        correct, total = (int(v) for v in self.accelerator.reduce(counts, reduction="sum"))
        return correct / max(total, 1)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval", **gen_kwargs):
        """`Seq2SeqTrainer.evaluate`, plus the source-use diagnostic (`wrong_source`): `{prefix}_wrong_source_accuracy`
        and `{prefix}_source_gap` (accuracy with the true sources minus that, in accuracy units) are logged with the
        validation curve."""
        metrics = super().evaluate(
            eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix, **gen_kwargs
        )
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        accuracy = metrics.get(f"{metric_key_prefix}_accuracy")
        if accuracy is not None and hasattr(dataset, "select") and len(dataset) > 1:
            wrong = self.source_use(dataset)
            extra = {
                f"{metric_key_prefix}_wrong_source_accuracy": wrong,
                f"{metric_key_prefix}_source_gap": accuracy - wrong,
            }
            self.log(extra)
            metrics.update(extra)
        return metrics

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        if not self.args.predict_with_generate or prediction_loss_only or "labels" not in inputs:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs)
        loss, generated, _ = super().prediction_step(
            model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs
        )
        inputs = self._prepare_inputs(inputs)
        labels = inputs["labels"]
        with torch.no_grad(), self.compute_loss_context_manager():
            # a second, teacher-forced pass: the base class discards the logits of its own
            logits = _split_logits(model(**inputs).logits)
        teacher_forced, row_nll = _teacher_forced(logits, labels)
        width = max(generated.shape[-1], labels.shape[-1])
        predictions = (
            _pad_to(generated, width, self._pad_id()),
            _pad_to(teacher_forced, width, IGNORE_INDEX),
            row_nll,
        )
        return loss, predictions, _pad_to(labels, width, IGNORE_INDEX)

    def _pad_id(self) -> int:
        pad = getattr(self.processing_class, "pad_token_id", None)
        return pad if pad is not None else self.model.config.pad_token_id


def build_compute_metrics(tokenizer: PreTrainedTokenizerBase):
    """`compute_metrics` for `TranslationTrainer`: accuracy always; BLEU, chrF and mean length when generating."""

    def compute_metrics(eval_pred) -> dict[str, float]:
        predictions, labels = eval_pred.predictions, eval_pred.label_ids
        generated, teacher_forced, _ = _unpack(predictions)
        correct, total = token_accuracy_counts(teacher_forced, labels, IGNORE_INDEX)
        metrics = {"accuracy": correct / max(total, 1)}
        if generated is not None:
            pad = tokenizer.pad_token_id
            hyps = tokenizer.batch_decode(np.where(generated < 0, pad, generated), skip_special_tokens=True)
            refs = tokenizer.batch_decode(np.where(labels < 0, pad, labels), skip_special_tokens=True)
            scores = translation_scores(hyps, refs)
            metrics.update(bleu=scores["bleu"], chrf=scores["chrf"])
            special = np.array(tokenizer.all_special_ids)
            metrics["gen_len"] = float(np.mean(~np.isin(generated, special) & (generated >= 0)) * generated.shape[-1])
        return metrics

    return compute_metrics


@dataclass
class TranslationRun:
    """What `train_translation` returns: the trained model, its tokenizer, the trainer and the final scores."""

    model: AgfForConditionalGeneration
    tokenizer: PreTrainedTokenizerBase
    trainer: TranslationTrainer
    datasets: Any
    train_metrics: dict[str, float] = field(default_factory=dict)
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)


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


def train_translation(
    options: TranslationOptions,
    *,
    training_args: Seq2SeqTrainingArguments | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    callbacks: Sequence[TrainerCallback] | None = None,
) -> TranslationRun:
    """Trains an AGF-family translation model with `Seq2SeqTrainer` and scores it on the test sets.

    Args:
        options: every setting of the run (`plldr_hf.training.options.TranslationOptions`, e.g.
            `TranslationOptions.from_name("tiny", pcmv=True)`): data, tokenizer, model and training.
        training_args: the `Seq2SeqTrainingArguments`; default `recipes.translation_arguments_of(options)`. Label
            smoothing belongs to the model (`options.label_smoothing`), so `label_smoothing_factor` must stay 0.
        tokenizer: an existing tokenizer object (else `options.tokenizer`, a folder; else one is trained on the
            training split, or the one already saved in the output folder is reused).
        callbacks: extra `TrainerCallback`s.

    Pairs that do not fit `max_source_length` / `max_target_length` whole are left out of training (evaluation and
    test splits are truncated, never filtered); training batches are length-bucketed (`LengthBucketSampler`)
    unless `bucket_by_length` is off.

    Returns:
        A `TranslationRun`; the model, tokenizer, generation config, `train_results.json` and
        `<split>_results.json` (scores with sacrebleu signatures) are saved in the output folder.
    """
    options = options.resolved()
    args = training_args if training_args is not None else translation_arguments_of(options)
    dataset = options.dataset[0] if len(options.dataset) == 1 else options.dataset
    source_lang, target_lang = options.source_lang, options.target_lang
    max_source_length, max_target_length = options.max_source_length, options.max_target_length
    num_beams, length_penalty = options.num_beams, options.length_penalty
    tokenizer = tokenizer if tokenizer is not None else options.tokenizer
    if args.label_smoothing_factor:
        raise ValueError(
            f"label_smoothing_factor={args.label_smoothing_factor} would smooth the loss twice; pass "
            "label_smoothing= to train_translation instead (the model computes the smoothed loss)"
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
        callbacks=list(callbacks or []),
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

    run = TranslationRun(model, tok, trainer, raw, train_metrics=train_output.metrics)
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
        run.scores[split] = scores
        if args.process_index == 0:
            _write_json(Path(args.output_dir) / f"{split}_results.json", scores)
            print(format_scores(scores, title=f"{split} ({len(raw[split])} segments)"))
    return run


def _write_json(path: Path, scores: dict) -> None:
    payload = {k: v for k, v in scores.items() if k != "hypotheses"}
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def evaluate_translation(
    model,
    tokenizer: PreTrainedTokenizerBase,
    dataset,
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
        dataset: the raw split, a `translation` column with `source_lang` and `target_lang`.
        source_lang: source language key.
        target_lang: target language key; its raw strings are the BLEU / chrF references.
        max_source_length: source truncation.
        max_target_length: reference truncation for accuracy and loss.
        batch_size: evaluation batch size per device.
        num_beams: beam size.
        max_length: most generated target tokens (default: `max_target_length`).
        bf16: bf16 autocast.
        tokenized: `dataset` already passed through `preprocess_translation` (row order unchanged).
        desc: name of the split in logs and metric keys.
        disable_tqdm: no progress bar.
        generate: False skips decoding: only accuracy and loss (a teacher-forced pass, much cheaper).

    Returns:
        `{"bleu", "chrf", "bleu_signature", "chrf_signature", "accuracy", "wrong_source_accuracy", "source_gap",
        "loss", "perplexity", "segments", "target_tokens", "num_beams", "hypotheses"}` (without the BLEU / chrF entries and hypotheses when
        `generate=False`); `loss` is the token-level cross-entropy over all target tokens (batch-independent).
    """
    if len(dataset) == 0:
        raise ValueError(f"the {desc} split is empty")
    if tokenized is None:
        tokenized = preprocess_translation(
            dataset,
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
    generated, teacher_forced, row_nll = _unpack(output.predictions)
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
        "segments": len(dataset),
        "target_tokens": total,
    }
    if not generate:
        return result
    pad = tokenizer.pad_token_id
    hypotheses = tokenizer.batch_decode(np.where(generated < 0, pad, generated), skip_special_tokens=True)
    references = [pair[target_lang] for pair in dataset["translation"]]
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
