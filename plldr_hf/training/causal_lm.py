"""The PLDR-LLM family's training pipeline: options → recipe → data → model → `PldrTrainer` → `RunReport`.

`train_causal_lm(options)` is the family's `train` entry point (`plldr_hf.training.run.train` calls it). Each step
is one call into the module that owns it, in this order, so a run's options pass through each module once:

| step | function | module |
|---|---|---|
| resume | `resolve_checkpoint` | `training/checkpoints.py` |
| model config (the options are the `TrainingArguments`) | `causal_lm_config` | `training/recipes.py` |
| start: an existing model (`--init-from`, LoRA) or none, the given tokenizer | `starting_point` | `training/start.py` |
| data: corpus, tokenizer, blocks, collator | `prepare_tokenizer_and_data` | `training/run_data.py` |
| model | `PldrllmForCausalLM` (or the Llama baseline) | `models/pldrllm/` |
| trainer, DAG schedule | `PldrTrainer`, `DagSchedule` | `training/trainer.py` |
| timing, clipping, order parameters, progress | `add_run_callbacks` | `training/callbacks.py` |
| report | `RunReport`, `loss_curves.png` | `training/run.py`, `plots.py` |
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from plldr_hf.evaluation import perplexity_from_metrics
from plldr_hf.models.pldrllm.plots import plot_stages_over_training
from plldr_hf.plots import loss_curves_skipped, plot_loss_curves
from plldr_hf.training.checkpoints import check_data_unchanged, resolve_checkpoint, train_from
from plldr_hf.training.data_checks import data_fault_message, is_data_fault
from plldr_hf.training.options import TrainOptions
from plldr_hf.training.recipes import causal_lm_config, seconds_per_step
from plldr_hf.training.report import RunReport, collect_warnings, run_settings
from plldr_hf.training.run_data import prepare_tokenizer_and_data
from plldr_hf.training.start import starting_point, with_lora


logger = logging.getLogger(__name__)

__all__ = ["TrainOptions", "train_causal_lm"]

# the options a resumed run must share with the run it continues
_RESUME_KEYS = ("size", "architecture", "block_size", "vocab_size", "dag_form", "streaming")


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


def train_causal_lm(options: TrainOptions, *, tokenizer=None, callbacks=()) -> RunReport:
    """Trains PLDR-LLM (or the Llama baseline) with `PldrTrainer`: the PLDR-LLM family's pipeline behind
    `plldr_hf.training.run.train`.

    Output folder: checkpoints (`checkpoint-*`), the final model and tokenizer, `loss_curves.png`,
    `train_report.json` (the `RunReport`: validation perplexity, order parameter before / after, timings),
    `log_history.json` and TensorBoard logs (`runs/`) when `report_to` includes it. `tokenizer`: an existing
    tokenizer object instead of `options.tokenizer` or a trained one.
    """
    with collect_warnings() as warnings:
        report = _train_causal_lm(options, tokenizer, callbacks)
    report.warnings = list(warnings)
    if report.main_process:
        report.save()
        logger.info("validation perplexity %.3f", report.scores["validation"]["perplexity"])
    return report


def calibration_blocks(blocks, config, count: int = 8) -> list[list[int]]:
    """Up to `count` validation blocks as calibration inputs of the order parameters: text the model learns to
    predict, cut to leave room for the diagnostic's continuation (`collapse.CALIBRATION_ROOM`)."""
    from plldr_hf.models.pldrllm.collapse import CALIBRATION_ROOM

    room = max(1, config.max_position_embeddings - CALIBRATION_ROOM)
    return [list(ids[:room]) for ids in blocks[: min(count, len(blocks))]["input_ids"]]


def _train_causal_lm(options: TrainOptions, tokenizer, callbacks) -> RunReport:
    from transformers import LlamaForCausalLM, set_seed

    from plldr_hf import PldrllmForCausalLM
    from plldr_hf.training.callbacks import add_run_callbacks
    from plldr_hf.training.trainer import DagSchedule, PldrTrainer

    if options.init_from and options.block_size is None:
        options.block_size = base_block_size(options.init_from)
        logger.info("blocks of %d tokens, as %s was trained with", options.block_size, options.init_from)
    checkpoint = resolve_checkpoint(options.resume_from_checkpoint, options.output_dir, "pldrllm")
    out = Path(options.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    options_file = out / "run_options.json"
    if checkpoint is not None and options_file.exists():
        previous = json.loads(options_file.read_text())
        for key in _RESUME_KEYS:
            if previous.get(key) != getattr(options, key):
                raise ValueError(
                    f"--resume: {key}={getattr(options, key)!r} differs from the run being resumed "
                    f"({previous.get(key)!r} in {options_file})"
                )

    config = causal_lm_config(options)
    start = starting_point(options, tokenizer)
    is_main = options.process_index == 0
    check_data_unchanged(out, options, resuming=checkpoint is not None, is_main=is_main)
    # the main process trains and saves the tokenizer first; the others load it, so every rank has the same one
    with options.main_process_first(desc="tokenizer and data", local=False):
        try:
            data = prepare_tokenizer_and_data(options, start.tokenizer, load_saved=not is_main)
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
        eval_blocks = data.validation.select(range(len(data.validation) - len(data.validation) % per_eval))
        if is_main and checkpoint is None:
            # the working directory resolves the run's relative data paths later (`plldr-hf evaluate` of the model)
            options_file.write_text(json.dumps({**run_settings(options), "working_directory": os.getcwd()}, indent=2))
            # a PldrllmTokenizer writes its SentencePiece model next to it as `tokenizer.model`
            data.tokenizer.save_pretrained(out)

    set_seed(options.seed)
    if start.model is not None:
        model = start.model
        config = model.config
        if options.block_size > config.max_position_embeddings:
            raise ValueError(
                f"--block-size {options.block_size} exceeds the {config.max_position_embeddings} positions of "
                f"{options.init_from}; give --block-size {config.max_position_embeddings} or less"
            )
    else:
        # the model is sized to the tokenizer, which may hold fewer pieces than asked for
        config.vocab_size = len(data.tokenizer)
        model = LlamaForCausalLM(config) if options.architecture == "llama" else PldrllmForCausalLM(config)
    model = with_lora(model, start)
    trainer = PldrTrainer(
        model=model,
        args=options,
        train_dataset=data.train,
        eval_dataset=eval_blocks,
        data_collator=data.collator,
        processing_class=data.tokenizer,
        callbacks=list(callbacks),
        dag_schedule=DagSchedule(options.dag_weights, options.dag_warmup_steps) if any(options.dag_weights) else None,
        decay_all_parameters=True,
        log_dag_losses=options.log_dag and options.architecture == "pldrllm",
    )
    learned_g = config.model_type == "pldrllm" and not config.has_fixed_G
    installed = add_run_callbacks(
        trainer,
        clip_by_value=options.clip_by == "value",
        progress=not options.disable_tqdm,
        desc=options.architecture,
        order_parameter_file=out / "order_parameter_init.json" if learned_g else None,
        resumed=checkpoint is not None,
        real_text=calibration_blocks(eval_blocks, config) if learned_g else None,
    )
    before = None
    if options.init_from and checkpoint is None:
        # the base model on the user's validation data, so the report shows what fine-tuning changed
        before = trainer.evaluate(metric_key_prefix="eval_before")
    try:
        train_result = train_from(trainer, checkpoint)
    except Exception as error:
        if options.streaming and is_data_fault(error):
            # a streamed file damaged past the start `data_checks.check_local_files` reads: say which data and when
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
        options=run_settings(options),
        model_class=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        vocab_size=len(data.tokenizer),
        global_step=trainer.state.global_step,
        max_steps=options.max_steps,
        train_examples=None if options.streaming else len(data.train),
        eval_examples=len(eval_blocks),
        model=trainer.model,
        tokenizer=data.tokenizer,
        log_history=history,
        main_process=trainer.is_world_process_zero(),
    )
    if not report.main_process:
        return report

    report.train_metrics = train_result.metrics
    report.eval_metrics = metrics
    report.scores["validation"] = {
        "perplexity": perplexity_from_metrics(metrics),
        "loss": metrics.get("eval_lm_loss", metrics.get("eval_loss")),
        "blocks": len(eval_blocks),
        "tokens_per_block": options.block_size,
    }
    if before is not None:
        report.scores["validation"]["perplexity_before"] = perplexity_from_metrics(before, prefix="eval_before")
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
    return report
