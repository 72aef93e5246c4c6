"""The PLDR-LLM family's training pipeline, in the shape of transformers' `run_clm.py`: options → starting point →
data → model → `PldrTrainer` → `RunReport`, read top to bottom in `train_causal_lm` (behind
`plldr_hf.training.run.train`).

| step | where |
|---|---|
| start: the checkpoint to resume (checked, with the run's settings and data), `--init-from`, LoRA | `start.starting_point` |
| data: corpus, tokenizer, blocks, collator | `language_model_data` below (`corpus`, `tokenizers`, `preprocessing`) |
| model: `PldrllmForCausalLM` (or the Llama baseline) of the recipe's config | `recipes.causal_lm_config` |
| trainer: DAG schedule, weight decay on every parameter | `trainer.PldrTrainer`, `dag_loss.DagSchedule` |
| timing, clipping by value, order parameters, progress | `callbacks.add_run_callbacks` |
| report, `loss_curves.png`, `stages_over_training.png` | `report.RunReport`, `plots` |
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plldr_hf.evaluation import perplexity_from_metrics
from plldr_hf.models.pldrllm.plots import plot_stages_over_training
from plldr_hf.plots import loss_curves_skipped, plot_loss_curves
from plldr_hf.training.corpus import (
    STREAMED_EVAL_BLOCKS,
    load_text_corpus,
    load_text_stream,
    streamed_validation_slice,
)
from plldr_hf.training.data_checks import data_fault_message, is_data_fault
from plldr_hf.training.options import TrainOptions
from plldr_hf.training.recipes import causal_lm_config, seconds_per_step
from plldr_hf.training.report import RunReport, collect_warnings, run_settings
from plldr_hf.training.start import starting_point


logger = logging.getLogger(__name__)

__all__ = ["LanguageModelData", "TrainOptions", "language_model_data", "train_causal_lm"]


def train_causal_lm(options: TrainOptions, *, tokenizer=None, callbacks=()) -> RunReport:
    """Trains PLDR-LLM (or the Llama baseline) with `PldrTrainer`: the PLDR-LLM family's pipeline behind
    `plldr_hf.training.run.train`.

    Output folder: checkpoints (`checkpoint-*`), the final model and tokenizer, `loss_curves.png`,
    `train_report.json` (the `RunReport`: validation perplexity, order parameter before / after, timings),
    `log_history.json` and TensorBoard logs (`runs/`) when `report_to` includes it. `tokenizer`: an existing
    tokenizer object instead of `options.tokenizer` or a trained one.
    """
    from transformers import LlamaForCausalLM, set_seed

    from plldr_hf import PldrllmForCausalLM
    from plldr_hf.models.pldrllm.collapse import CALIBRATION_ROOM
    from plldr_hf.training.callbacks import add_run_callbacks
    from plldr_hf.training.trainer import DagSchedule, PldrTrainer

    with collect_warnings() as warnings:
        if options.init_from and options.block_size is None:
            options.block_size = base_block_size(options.init_from)
            logger.info("blocks of %d tokens, as %s was trained with", options.block_size, options.init_from)
        config = causal_lm_config(options)  # a setting the model refuses stops the run before any work
        start = starting_point(options, tokenizer)
        settings = run_settings(options)  # as saved in run_options.json and the report
        out = Path(options.output_dir)
        is_main = options.process_index == 0
        # the main process trains and saves the tokenizer first; the others load it, so every rank has the same one
        with options.main_process_first(desc="tokenizer and data", local=False):
            data = language_model_data(options, start.tokenizer, load_saved=not is_main)
            if is_main and start.checkpoint is None:
                # the working directory resolves the run's relative data paths later (`plldr-hf evaluate`)
                saved = {**settings, "working_directory": os.getcwd()}
                (out / "run_options.json").write_text(json.dumps(saved, indent=2))
                # a PldrllmTokenizer writes its SentencePiece model next to it as `tokenizer.model`
                data.tokenizer.save_pretrained(out)

        set_seed(options.seed)
        if start.model is not None:
            model = start.model
            if options.block_size > model.config.max_position_embeddings:
                raise ValueError(
                    f"--block-size {options.block_size} exceeds the {model.config.max_position_embeddings} positions "
                    f"of {options.init_from}; give --block-size {model.config.max_position_embeddings} or less"
                )
        else:
            # the model is sized to the tokenizer, which may hold fewer pieces than asked for
            config.vocab_size = len(data.tokenizer)
            model = LlamaForCausalLM(config) if options.architecture == "llama" else PldrllmForCausalLM(config)
        config = model.config
        if start.lora is not None:
            from peft import get_peft_model

            model = get_peft_model(model, start.lora)
        trainer = PldrTrainer(
            model=model,
            args=options,
            train_dataset=data.train,
            eval_dataset=data.validation,
            data_collator=data.collator,
            processing_class=data.tokenizer,
            callbacks=list(callbacks),
            dag_schedule=DagSchedule(options.dag_weights, options.dag_warmup_steps)
            if any(options.dag_weights)
            else None,
            decay_all_parameters=True,
            log_dag_losses=options.log_dag and options.architecture == "pldrllm",
        )
        learned_g = config.model_type == "pldrllm" and not config.has_fixed_G
        real_text = None
        if learned_g:
            # validation blocks as calibration inputs of the order parameters beside the default ones: text the model
            # learns to predict, cut to leave room for the diagnostic's continuation
            room = max(1, config.max_position_embeddings - CALIBRATION_ROOM)
            real_text = [list(ids[:room]) for ids in data.validation[: min(8, len(data.validation))]["input_ids"]]
        installed = add_run_callbacks(
            trainer,
            clip_by_value=options.clip_by == "value",
            progress=not options.disable_tqdm,
            desc=options.architecture,
            order_parameter_file=out / "order_parameter_init.json" if learned_g else None,
            resumed=start.checkpoint is not None,
            real_text=real_text,
        )
        before = None
        if options.init_from and start.checkpoint is None:
            # the base model on the user's validation data, so the report shows what fine-tuning changed
            before = trainer.evaluate(metric_key_prefix="eval_before")
        try:
            train_result = trainer.train(resume_from_checkpoint=start.checkpoint)
        except Exception as error:
            if options.streaming and is_data_fault(error):
                # a streamed file damaged past the start `data_checks.check_local_files` reads: which data, and when
                when = f" (after step {trainer.state.global_step}; resume with --resume once fixed)"
                raise ValueError(data_fault_message(options.dataset, error, when)) from error
            raise
        metrics = trainer.evaluate()
        if start.lora is not None:
            # the adapters beside the model they were merged into: the output folder loads as a plain model
            trainer.model.save_pretrained(out / "adapter")
            model = trainer.model = trainer.model.merge_and_unload()
        trainer.save_model()
        history = trainer.state.log_history
        report = RunReport(
            family="pldrllm",
            output_dir=str(out),
            options=settings,
            model_class=type(model).__name__,
            parameters=sum(p.numel() for p in model.parameters()),
            vocab_size=len(data.tokenizer),
            global_step=trainer.state.global_step,
            max_steps=options.max_steps,
            train_examples=None if options.streaming else len(data.train),
            eval_examples=len(data.validation),
            model=trainer.model,
            tokenizer=data.tokenizer,
            log_history=history,
            main_process=trainer.is_world_process_zero(),
        )
        if report.main_process:
            report.train_metrics, report.eval_metrics = train_result.metrics, metrics
            report.scores["validation"] = {
                "perplexity": perplexity_from_metrics(metrics),
                "loss": metrics.get("eval_lm_loss", metrics.get("eval_loss")),
                "blocks": len(data.validation),
                "tokens_per_block": options.block_size,
            }
            if before is not None:
                report.scores["validation"]["perplexity_before"] = perplexity_from_metrics(before, "eval_before")
            order = installed.order_parameters
            report.diagnostics = {
                "order_parameter_before": order.before if order else None,
                "order_parameter_after": order.after if order else None,
                "order_parameter_after_real_text": order.after_real_text if order else None,
            }
            report.step_timing = installed.timer.summary()
            report.seconds_per_step = seconds_per_step(train_result.metrics, trainer.state.global_step)
            report.loss_curves_skipped = loss_curves_skipped(history)
            curves = plot_loss_curves(history, out / "loss_curves.png", f"{options.architecture} {options.size}")
            report.loss_curves = str(curves) if curves else None
            if curves is None:
                logger.info("loss curves not plotted: %s", report.loss_curves_skipped)
            stages = plot_stages_over_training(history, out / "stages_over_training.png")
            report.stage_curves = str(stages) if stages else None
            (out / "log_history.json").write_text(json.dumps(history, indent=1))
    report.warnings = list(warnings)
    if report.main_process:
        report.save()
        logger.info("validation perplexity %.3f", report.scores["validation"]["perplexity"])
    return report


def base_block_size(init_from: str) -> int:
    """The block size a fine-tune of `init_from` trains with: the one its own run used (`run_options.json` beside
    it), else its context (`max_position_embeddings`, at most 1,024, the released models' blocks)."""
    from plldr_hf.loading import read_config

    folder = Path(init_from)
    try:
        run = json.loads((folder / "run_options.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        run = {}
    if isinstance(run, dict) and isinstance(run.get("block_size"), int) and run["block_size"] > 0:
        return run["block_size"]
    if folder.is_dir():
        positions = read_config(folder).get("max_position_embeddings")
    else:  # a Hub id
        from transformers import AutoConfig

        positions = AutoConfig.from_pretrained(init_from).max_position_embeddings
    return min(int(positions or 1024), 1024)


@dataclass
class LanguageModelData:
    """What a PLDR-LLM run trains on: its tokenizer, the training examples (packed blocks or documents), the
    validation blocks and the collator that batches them."""

    tokenizer: Any
    train: Any
    validation: Any
    collator: Any


def language_model_data(options: TrainOptions, tokenizer=None, load_saved: bool = False) -> LanguageModelData:
    """The tokenizer, train / validation blocks and collator of a PLDR-LLM run (`TrainOptions`): its corpus
    (`load_text_corpus`, or `load_text_stream` with `streaming`), tokenizer (given, saved or trained:
    `train_sentencepiece_tokenizer`), blocks (`pack_into_blocks`, `split_into_documents` with `padding_free`;
    `pack_stream` with `streaming`) and `training_collator`.

    The tokenizer is `tokenizer` if given (the run's starting point: `options.tokenizer`, or the `init_from`
    model's), else the one saved in `options.output_dir` when resuming or when `load_saved` (the other processes of a
    distributed run, after the main one trained it), else trained on the training split (streaming: on its first
    `tokenizer_sample_documents` documents). Streamed, the training blocks are an `IterableDataset` read as training
    consumes it, and the validation blocks a fixed held-out slice (`max_eval_blocks`, default 256 blocks), whole
    evaluation batches of it. A fault of the data, or too little of it for one batch, is a ValueError that names it."""
    try:
        data = _language_model_data(options, tokenizer, load_saved)
    except Exception as error:
        if not is_data_fault(error):
            raise
        raise ValueError(data_fault_message(options.dataset, error)) from error
    # the recipe drops an incomplete last batch: fewer examples than one batch would train 0 steps
    per_step = options.per_device_train_batch_size * max(options.world_size, 1)
    if not options.streaming and len(data.train) < per_step:
        unit = "documents" if options.padding_free else f"blocks of {options.block_size} tokens"
        raise ValueError(
            f"the training data makes {len(data.train)} {unit}, fewer than one batch of {per_step}, so no "
            "step could run; lower --block-size or --batch-size, or give more data"
        )
    # the recipe drops an incomplete batch in evaluation too: score whole batches only, and say how many blocks
    per_eval = options.per_device_eval_batch_size * max(options.world_size, 1)
    if len(data.validation) < per_eval:
        # refused before the first step: the run would train, then find nothing to evaluate
        raise ValueError(
            f"the validation split makes {len(data.validation)} block(s) of {options.block_size} tokens, fewer "
            f"than one evaluation batch of {per_eval}, so the run could not be evaluated; add a "
            "validation*.txt file with more text, give more data (a share of it is held out), or lower "
            "--block-size"
        )
    data.validation = data.validation.select(range(len(data.validation) - len(data.validation) % per_eval))
    return data


def _language_model_data(options: TrainOptions, tokenizer, load_saved: bool) -> LanguageModelData:
    from transformers import AutoTokenizer

    from plldr_hf.training.preprocessing import pack_into_blocks, pack_stream, split_into_documents, training_collator
    from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer

    source = dict(dataset_config=options.dataset_config, text_column=options.text_column)
    if options.streaming:
        train_docs, validation_docs = load_text_stream(options.dataset or None, **source)
        if options.max_train_documents is not None:
            train_docs = train_docs.take(options.max_train_documents)
        tokenizer_docs = [row["text"] for row in train_docs.take(options.tokenizer_sample_documents)]
    else:
        corpus = load_text_corpus(
            options.dataset or None, max_train_documents=options.max_train_documents, seed=options.seed, **source
        )
        train_docs, validation_docs, tokenizer_docs = corpus["train"], corpus["validation"], corpus["train"]
    saved = Path(options.output_dir, "tokenizer.json")
    if tokenizer is None and (options.resume_from_checkpoint or load_saved) and saved.exists():
        tokenizer = AutoTokenizer.from_pretrained(options.output_dir)
    elif tokenizer is None:
        logger.info("training a %d-piece SentencePiece unigram tokenizer", options.vocab_size)
        tokenizer = train_sentencepiece_tokenizer(
            tokenizer_docs, options.vocab_size, model_max_length=options.block_size, seed=options.seed
        )
        if len(tokenizer) < options.vocab_size:
            # SentencePiece stops where the corpus has no more pieces to offer; the model is sized to the result
            logger.warning(
                "the tokenizer has %d pieces, fewer than the %d asked for: the training text is too small for more",
                len(tokenizer),
                options.vocab_size,
            )
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token (PLDR-LLM separates documents with [END])")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        # the collator drops pad ids from the labels; with pad = eos the document ends would never be learned
        raise ValueError(
            f"the tokenizer's pad token ({tokenizer.pad_token!r}) must be a token of its own, not None or the eos "
            "token; use a tokenizer with a [PAD] token (the PLDR-LLM tokenizer has one) or train one (no --tokenizer)"
        )
    max_eval_blocks = options.max_eval_blocks
    if options.streaming:
        max_eval_blocks = max_eval_blocks or STREAMED_EVAL_BLOCKS
        validation_docs = streamed_validation_slice(
            validation_docs, tokenizer, options.block_size, max_eval_blocks, options.dataset
        )
        train_blocks = pack_stream(train_docs, tokenizer, options.block_size, padding_free=options.padding_free)
    elif options.padding_free:
        train_blocks = split_into_documents(train_docs, tokenizer, options.block_size, desc="Train documents")
    else:
        train_blocks = pack_into_blocks(train_docs, tokenizer, options.block_size, desc="Packing train")
    eval_blocks = pack_into_blocks(
        validation_docs, tokenizer, options.block_size, max_blocks=max_eval_blocks, desc="Packing validation"
    )
    collator = training_collator(options.padding_free, tokenizer)
    return LanguageModelData(tokenizer, train_blocks, eval_blocks, collator)
