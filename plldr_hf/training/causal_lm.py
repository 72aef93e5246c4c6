"""Causal-LM training pipeline for PLDR-LLM: corpus → tokenizer → packed blocks → Trainer → report.

`train_causal_lm(TrainOptions(...))` runs the whole pipeline with checkpointing and resume, from the pieces in their
own modules:

| step | function | module |
|---|---|---|
| documents | `load_text_corpus` | `training/corpus.py` |
| tokenizer | `train_sentencepiece_tokenizer` (or a given one) | `training/tokenizers.py` |
| blocks | `pack_into_blocks` / `split_into_documents` (padding-free) | `training/preprocessing.py` |
| model, recipe | `pldrllm_config`, `llama_config_like`, `reference_training_arguments` | `training/recipes.py` |
| train | `PldrTrainer` (with its `DagSchedule`), `ClipGradValueCallback` | `training/trainer.py`, `training/callbacks.py` |
| resume | `resolve_checkpoint` | `training/checkpoints.py` |
| report | validation perplexity, order parameter before / after, `loss_curves.png` | `evaluation.py`, `plots.py` |

The CLI (`plldr-hf train pldrllm`, whose flags are generated from `TrainOptions`) and `examples/train_pldr_llm.py`
call `train_causal_lm`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

from plldr_hf.evaluation import perplexity_from_metrics
from plldr_hf.loading import load_tokenizer
from plldr_hf.plots import loss_curves_skipped, plot_loss_curves
from plldr_hf.training.checkpoints import resolve_checkpoint
from plldr_hf.training.corpus import load_text_corpus
from plldr_hf.training.distributed import fsdp_config
from plldr_hf.training.options import TrainOptions
from plldr_hf.training.preprocessing import pack_into_blocks, split_into_documents
from plldr_hf.training.recipes import (
    llama_config_like,
    pldrllm_config,
    reference_training_arguments,
    seconds_per_step,
)
from plldr_hf.training.run import RunReport, collect_warnings
from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer


logger = logging.getLogger(__name__)

__all__ = [
    "TrainOptions",
    "build_model",
    "fsdp_arguments",
    "order_parameters",
    "prepare_tokenizer_and_data",
    "train_causal_lm",
    "training_collator",
]


def training_collator(options: TrainOptions, tokenizer=None):
    """Fixed packed blocks stacked as they are (transformers' `DataCollatorForLanguageModeling(mlm=False)`: labels
    = inputs, the model shifts them), or (`padding_free`) one document per example concatenated into one row with
    restarting `position_ids` (`DataCollatorWithFlattening`): no padding at all, and the model keeps the documents
    apart (their own Gram matrix and attention)."""
    from transformers import DataCollatorForLanguageModeling, DataCollatorWithFlattening

    if options.padding_free:
        return DataCollatorWithFlattening(return_tensors="pt")
    if tokenizer is None:
        raise ValueError("training_collator: packed blocks need the tokenizer (its pad id marks no label)")
    return DataCollatorForLanguageModeling(tokenizer, mlm=False, return_tensors="pt")


def _decoder_layers(architecture: str) -> list[str]:
    # one FSDP unit per decoder layer: the family's block, or Llama's for the comparison baseline
    from plldr_hf.models import FAMILIES

    if architecture in FAMILIES:
        return [FAMILIES[architecture].decoder_layer_class.__name__]
    from transformers import LlamaPreTrainedModel

    return list(LlamaPreTrainedModel._no_split_modules)


def fsdp_arguments(options: TrainOptions) -> dict:
    """The `TrainingArguments` fields of `--fsdp`: FSDP2 full shard, one decoder layer per unit, full state dict."""
    import torch

    if not options.fsdp:
        return {}
    if not torch.cuda.is_available():
        raise ValueError(
            "--fsdp needs GPUs: accelerate shards only on accelerator devices, and on CPUs several processes train "
            "with DDP; drop --fsdp and run under torchrun (gloo)"
        )
    return {"fsdp": True, "fsdp_config": fsdp_config(_decoder_layers(options.architecture))}


def prepare_tokenizer_and_data(options: TrainOptions, tokenizer=None, load_saved: bool = False):
    """Corpus, tokenizer and packed train / validation blocks.

    The tokenizer is `tokenizer` if given, else loaded from `options.tokenizer`, else the one saved in
    `options.output_dir` when resuming or when `load_saved` (the other processes of a distributed run, after the
    main one trained it), else trained on the training split."""
    from transformers import AutoTokenizer

    corpus = load_text_corpus(
        options.dataset or None,
        dataset_config=options.dataset_config,
        text_column=options.text_column,
        max_train_documents=options.max_train_documents,
        seed=options.seed,
    )
    saved = Path(options.output_dir, "tokenizer.json")
    if tokenizer is None and options.tokenizer:
        tokenizer = load_tokenizer(options.tokenizer)  # a missing folder or file is named, not a Hub-id error
    elif tokenizer is None and (options.resume or load_saved) and saved.exists():
        tokenizer = AutoTokenizer.from_pretrained(options.output_dir)
    elif tokenizer is None:
        logger.info("training a %d-piece SentencePiece unigram tokenizer", options.vocab_size)
        tokenizer = train_sentencepiece_tokenizer(
            corpus["train"], options.vocab_size, model_max_length=options.block_size, seed=options.seed
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
    if options.padding_free:
        train_blocks = split_into_documents(corpus["train"], tokenizer, options.block_size, desc="Train documents")
    else:
        train_blocks = pack_into_blocks(corpus["train"], tokenizer, options.block_size, desc="Packing train")
    eval_blocks = pack_into_blocks(
        corpus["validation"],
        tokenizer,
        options.block_size,
        max_blocks=options.max_eval_blocks,
        desc="Packing validation",
    )
    return tokenizer, train_blocks, eval_blocks


def build_model(options: TrainOptions, vocab_size: int):
    """A freshly initialised PLDR-LLM (or the Llama baseline) of `options.size`, seeded by `options.seed`."""
    from transformers import LlamaForCausalLM, set_seed

    from plldr_hf import PldrllmForCausalLM

    config = pldrllm_config(
        options.size,
        vocab_size,
        max_position_embeddings=options.block_size,
        dag_loss_form=options.dag_form,
    )
    set_seed(options.seed)
    if options.architecture == "llama":
        return LlamaForCausalLM(llama_config_like(config))
    return PldrllmForCausalLM(config)


def order_parameters(model, calibration=None, new_tokens: int = 16) -> dict | None:
    """Order parameters of A, A_LM, A_P, G_LM from `plldr_hf.models.pldrllm.diagnostics.diagnose` (the model is not changed).

    Both are the SOC statistic RMSE(x − x_ref)/|mean(x_ref)| per layer, **maximum over layers** (the keys say what
    is compared): `"across_inputs_max_over_layers"` (the headline, and what `collapse()` tests) between the
    calibration inputs, x_ref the first one; `"prompt_vs_continuation_max_over_layers"` between each prompt and the
    prompt plus `new_tokens` greedy tokens (the SOC definition of arXiv 2603.23539). `calibration` None: the default
    calibration of `collapse()` and `plldr-hf diagnose` (`default_calibration`), so the three report the same
    number for one model. ≈ 0 means input-invariant (near-critical); order 1 and above, sub-critical. None for
    models without a learned G (the Llama baseline, a fixed-G or collapsed PLDR-LLM).
    """
    from plldr_hf.models.pldrllm.diagnostics import diagnose

    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "pldrllm" or config.has_fixed_G:
        return None
    try:
        report = diagnose(model, inputs=calibration, new_tokens=new_tokens)
    except ValueError as error:
        # a diverged model: say so instead of dying after the whole run
        logger.warning("order parameters not measured: %s", error)
        return None
    return {
        "across_inputs_max_over_layers": dict(report.order_parameter_inputs),
        "prompt_vs_continuation_max_over_layers": dict(report.order_parameter),
    }


def train_causal_lm(options: TrainOptions, *, tokenizer=None, callbacks=()) -> RunReport:
    """Trains PLDR-LLM (or the Llama baseline) with `PldrTrainer`: the PLDR-LLM family's pipeline behind
    `plldr_hf.training.run.train`.

    Output folder: checkpoints (`checkpoint-*`), the final model and tokenizer, `loss_curves.png`,
    `train_report.json` (the `RunReport`: validation perplexity, order parameter before / after, timings),
    `log_history.json` and TensorBoard logs (`runs/`) when `report_to` includes it. `tokenizer`: an existing
    tokenizer object instead of `options.tokenizer` or a trained one.
    """
    with collect_warnings() as warnings:
        report = _train_causal_lm(options.resolved(), tokenizer, callbacks)
    report.warnings = list(warnings)
    if report.main_process:
        report.save()
        logger.info("validation perplexity %.3f", report.scores["validation"]["perplexity"])
    return report


def _train_causal_lm(options: TrainOptions, tokenizer, callbacks) -> RunReport:
    from plldr_hf.training.callbacks import ClipGradValueCallback, StepTimerCallback, use_progress_bar
    from plldr_hf.training.trainer import DagSchedule, PldrTrainer

    checkpoint = resolve_checkpoint(options.resume, options.output_dir, "pldrllm")
    out = Path(options.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    options_file = out / "run_options.json"
    if checkpoint is not None and options_file.exists():
        previous = json.loads(options_file.read_text())
        for key in ("size", "architecture", "block_size", "vocab_size", "dag_form"):
            if previous.get(key) != getattr(options, key):
                raise ValueError(
                    f"--resume: {key}={getattr(options, key)!r} differs from the run being resumed "
                    f"({previous.get(key)!r} in {options_file})"
                )

    # creating the arguments sets up the distributed state (torchrun / accelerate launch)
    args = reference_training_arguments(
        str(out),
        max_steps=options.max_steps,
        learning_rate=options.learning_rate,
        warmup_steps=options.warmup_steps,
        per_device_train_batch_size=options.batch_size,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
        clip_by=options.clip_by,
        bf16=options.bf16,
        logging_steps=options.logging_steps,
        eval_steps=options.eval_steps if options.eval_steps is not None else max(1, options.max_steps // 5),
        save_steps=options.save_steps,
        save_total_limit=options.save_total_limit,
        report_to=options.report_to or "none",
        seed=options.seed,
        disable_tqdm=options.no_progress,
        **fsdp_arguments(options),
    )
    is_main = args.process_index == 0
    # the main process trains and saves the tokenizer first; the others load it, so every rank has the same one
    with args.main_process_first(desc="tokenizer and data", local=False):
        tokenizer, train_blocks, eval_blocks = prepare_tokenizer_and_data(options, tokenizer, load_saved=not is_main)
        # the recipe drops an incomplete last batch: fewer examples than one batch would train 0 steps
        per_step = args.per_device_train_batch_size * max(args.world_size, 1)
        if len(train_blocks) < per_step:
            unit = "documents" if options.padding_free else f"blocks of {options.block_size} tokens"
            raise ValueError(
                f"the training data makes {len(train_blocks)} {unit}, fewer than one batch of {per_step}, so no "
                "step could run; lower --block-size or --batch-size, or give more data"
            )
        # the recipe drops an incomplete batch in evaluation too: score whole batches only, and say how many blocks
        per_eval = args.per_device_eval_batch_size * max(args.world_size, 1)
        if len(eval_blocks) < per_eval:
            # refused before the first step: the run would train, then find nothing to evaluate
            raise ValueError(
                f"the validation split makes {len(eval_blocks)} block(s) of {options.block_size} tokens, fewer than "
                f"one evaluation batch of {per_eval}, so the run could not be evaluated; add a validation*.txt file "
                "with more text, give more data (a share of it is held out), or lower --block-size"
            )
        eval_blocks = eval_blocks.select(range(len(eval_blocks) - len(eval_blocks) % per_eval))
        if is_main and checkpoint is None:
            options_file.write_text(json.dumps(asdict(options), indent=2))
            # a PldrllmTokenizer writes its SentencePiece model next to it as `tokenizer.model`
            tokenizer.save_pretrained(out)
    model = build_model(options, len(tokenizer))
    init_file = out / "order_parameter_init.json"
    if checkpoint is None:
        before = order_parameters(model) if is_main else None
        if is_main:
            init_file.write_text(json.dumps(before))
    else:
        before = json.loads(init_file.read_text()) if init_file.exists() else None

    timer = StepTimerCallback()
    callbacks = [timer, *callbacks]
    if options.clip_by == "value":
        callbacks.append(ClipGradValueCallback(1.0))
    trainer = PldrTrainer(
        model=model,
        args=args,
        train_dataset=train_blocks,
        eval_dataset=eval_blocks,
        data_collator=training_collator(options, tokenizer),
        processing_class=tokenizer,
        callbacks=callbacks,
        dag_schedule=DagSchedule(options.dag_weights, options.dag_warmup_steps) if any(options.dag_weights) else None,
        decay_all_parameters=True,
        log_dag_losses=options.log_dag and options.architecture == "pldrllm",
    )
    use_progress_bar(trainer, not options.no_progress, desc=options.architecture)
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = trainer.evaluate()
    trainer.save_model()
    report = RunReport(
        family="pldrllm",
        output_dir=str(out),
        options=asdict(options),
        model_class=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        vocab_size=len(tokenizer),
        global_step=trainer.state.global_step,
        max_steps=options.max_steps,
        train_examples=len(train_blocks),
        eval_examples=len(eval_blocks),
        model=trainer.model,
        tokenizer=tokenizer,
        log_history=trainer.state.log_history,
        main_process=trainer.is_world_process_zero(),
    )
    if not report.main_process:
        return report

    history = trainer.state.log_history
    report.train_metrics = train_result.metrics
    report.eval_metrics = metrics
    loss = metrics.get("eval_lm_loss", metrics.get("eval_loss"))
    report.scores["validation"] = {
        "perplexity": perplexity_from_metrics(metrics),
        "loss": loss,
        "blocks": len(eval_blocks),
        "tokens_per_block": options.block_size,
    }
    report.diagnostics = {"order_parameter_before": before, "order_parameter_after": order_parameters(trainer.model)}
    report.step_timing = timer.summary()
    report.seconds_per_step = seconds_per_step(train_result.metrics, trainer.state.global_step)
    report.loss_curves_skipped = loss_curves_skipped(history)
    curves = plot_loss_curves(history, out / "loss_curves.png", f"{options.architecture} {options.size}")
    report.loss_curves = str(curves) if curves else None
    if curves is None:
        logger.info("loss curves not plotted: %s", report.loss_curves_skipped)
    (out / "log_history.json").write_text(json.dumps(history, indent=1))
    return report
