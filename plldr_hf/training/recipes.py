"""Training recipes: the named model sizes and the `TrainingArguments` each family is trained with.

PLDR-LLM:

- `pldrllm_config` (the named sizes of `plldr_hf.training.options.PRESETS["pldrllm"]`), `llama_config_like` (the
  baseline of the same width and depth);
- `reference_training_arguments` — the reference recipe (github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality; arXiv 2603.23539): AdamW (0.9, 0.95), eps 1e-5, weight
  decay 0.1 on every parameter, clipping by value 1.0, linear warm-up then cosine to 10 % of the peak through the
  stock `cosine_with_min_lr` scheduler, bf16 where the GPU supports it.

AGF translation Transformer:

- `agf_config` (the sizes of `PRESETS["agf"]`), `translation_recipe`; the named position variants of the paper's
  comparison are `plldr_hf.models.agf.position_encodings.POSITION_VARIANTS`;
- `translation_arguments_of(options)` (and `translation_training_arguments`, the default options) — Adam (β₂ 0.98, ε 1e-9), inverse-square-root decay after a linear warm-up
  (Vaswani et al., arXiv 1706.03762, §5).

Shared: `bf16_available`, `seconds_per_step` (the one definition of s/step every report uses).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from plldr_hf.training.options import TrainOptions, TranslationOptions
from plldr_hf.training.presets import preset


if TYPE_CHECKING:
    from transformers import PretrainedConfig, Seq2SeqTrainingArguments, TrainingArguments

    from plldr_hf.models.agf import AgfConfig


logger = logging.getLogger(__name__)

__all__ = [
    "agf_config",
    "bf16_available",
    "causal_lm_recipe",
    "gradient_accumulation",
    "llama_config_like",
    "model_fields",
    "pldrllm_config",
    "reference_training_arguments",
    "seconds_per_step",
    "translation_arguments_of",
    "translation_recipe",
    "translation_training_arguments",
]


def bf16_available() -> bool:
    """Whether training can use bf16 mixed precision: a CUDA device that supports it (CPU runs float32)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def _default_report_to() -> list[str] | str:
    """TensorBoard when it is installed, else no integration."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return "none"
    return ["tensorboard"]


def model_fields(family: str, size: str) -> dict:
    """The model config fields of a size: a shipped recipe's name or a recipe file (`presets.preset`)."""
    return dict(preset(family, size)["model"])


def gradient_accumulation(options: TrainOptions, processes: int) -> int:
    """Micro-batches per optimizer step: `options.global_batch_size` / (batch size x `processes`) when the options
    set a global batch (so the recipe is the same on any number of processes; logged), else
    `options.gradient_accumulation_steps`."""
    if options.global_batch_size is None:
        return options.gradient_accumulation_steps
    per_step = options.batch_size * processes
    if options.global_batch_size % per_step:
        raise ValueError(
            f"--global-batch-size {options.global_batch_size} is not a multiple of --batch-size {options.batch_size} "
            f"x {processes} process(es); choose a multiple of {per_step}"
        )
    accumulation = options.global_batch_size // per_step
    logger.info(
        "global batch of %d = %d per process x %d process(es) x %d accumulation steps",
        options.global_batch_size,
        options.batch_size,
        processes,
        accumulation,
    )
    return accumulation


def causal_lm_recipe(options: TrainOptions) -> tuple[TrainingArguments, PretrainedConfig]:
    """What a PLDR-LLM run (or its Llama baseline) is built from: its `TrainingArguments` (the reference recipe with
    the options' values; FSDP2 with `fsdp`) and the model config of its size, with the vocabulary asked for (the run
    sets the tokenizer's own size once it has one). Creating the arguments sets up the distributed state
    (torchrun / accelerate launch), so a run asks for them before it reads data."""
    # a fine-tune (`init_from`) trains the base model's config; the size's stands in until the run has it
    vocab_size = options.vocab_size or preset("pldrllm", options.size)["run"]["vocab_size"]
    config = pldrllm_config(
        options.size, vocab_size, max_position_embeddings=options.block_size, dag_loss_form=options.dag_form
    )
    if options.architecture == "llama":
        config = llama_config_like(config)
    accumulation = gradient_accumulation(options, int(os.environ.get("WORLD_SIZE", "1")))
    streamed = dict(accelerator_config={"dispatch_batches": False}) if options.streaming else {}
    args = reference_training_arguments(
        str(options.output_dir),
        max_steps=options.max_steps,
        learning_rate=options.learning_rate,
        warmup_steps=options.warmup_steps,
        per_device_train_batch_size=options.batch_size,
        gradient_accumulation_steps=accumulation,
        clip_by=options.clip_by,
        bf16=options.bf16,
        logging_steps=options.logging_steps,
        eval_steps=options.eval_steps if options.eval_steps is not None else max(1, options.max_steps // 5),
        save_steps=options.save_steps,
        save_total_limit=options.save_total_limit,
        report_to=options.report_to or "none",
        seed=options.seed,
        disable_tqdm=options.no_progress,
        fsdp_for=config if options.fsdp else None,
        include_num_input_tokens_seen=True,
        # each process reads its own shards of a stream, instead of the main process reading for all
        **streamed,
        **options.trainer_args,
    )
    return args, config


def pldrllm_config(
    size: str,
    vocab_size: int,
    *,
    max_position_embeddings: int | None = None,
    dag_loss_form: str = "log_ratio",
    **overrides,
):
    """`PldrllmConfig` of a named size (a key of `PRESETS["pldrllm"]`) with the vocabulary of the tokenizer.

    Example:
        >>> pldrllm_config("tiny", 1024).hidden_size
        64
    """
    from plldr_hf import PldrllmConfig

    recipe = preset("pldrllm", size)  # a recipe file is read once
    fields = dict(recipe["model"])
    fields.update(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings or recipe["run"]["block_size"],
        dag_loss_form=dag_loss_form,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    fields.update(overrides)
    return PldrllmConfig(**fields)


def llama_config_like(config):
    """`LlamaConfig` of the same width, depth, heads, FFN width, vocabulary, context and RoPE base as a
    `PldrllmConfig`, with biases on the attention and MLP Linears and an untied LM head (as PLDR-LLM). What differs
    is the architecture itself: pre-RMSNorm layers, plain SDPA attention, no metric learner."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_attention_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
        rms_norm_eps=config.layer_norm_eps,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def reference_training_arguments(
    output_dir: str,
    *,
    max_steps: int,
    learning_rate: float = 1e-3,
    warmup_steps: int | None = None,
    per_device_train_batch_size: int = 16,
    per_device_eval_batch_size: int | None = None,
    gradient_accumulation_steps: int = 1,
    clip_by: str = "value",
    bf16: bool | None = None,
    logging_steps: int = 10,
    eval_steps: int | None = None,
    save_steps: int | None = None,
    save_total_limit: int | None = 2,
    report_to: str | list[str] = "none",
    seed: int = 0,
    fsdp_for: PretrainedConfig | None = None,
    **overrides,
):
    """`TrainingArguments` with the reference recipe (github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality; arXiv 2603.23539) as defaults.

    AdamW β = (0.9, 0.95), eps 1e-5, weight decay 0.1 (apply it to every parameter with
    `PldrTrainer(decay_all_parameters=True)`), linear warm-up to `learning_rate` then cosine decay to 10 % of it
    at `max_steps` (the stock `cosine_with_min_lr` scheduler with `min_lr_rate=0.1`), bf16 when the GPU supports
    it. `clip_by="value"` turns Trainer's norm clipping off (`max_grad_norm=0`) for `ClipGradValueCallback(1.0)`;
    `"norm"` clips by norm 1.0. On CPU with several processes (torchrun) DDP uses gloo.

    `warmup_steps=None` takes 10 % of `max_steps`, at most the reference's 2000. `fsdp_for`: shard the model of
    this config with FSDP2, one decoder layer per unit (`distributed.fsdp_arguments`; GPUs only).
    """
    import torch
    from transformers import TrainingArguments

    if max_steps <= 0:
        raise ValueError(f"max_steps must be positive, got {max_steps}")
    if clip_by not in ("value", "norm"):
        raise ValueError(f"clip_by must be 'value' or 'norm', got {clip_by!r}")
    if warmup_steps is None:
        warmup_steps = min(2000, max(1, max_steps // 10))
    if bf16 is None:
        bf16 = bf16_available()
    kwargs = dict(
        output_dir=output_dir,
        max_steps=max_steps,
        learning_rate=learning_rate,
        lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": 0.1},
        warmup_steps=int(warmup_steps),
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_epsilon=1e-5,
        weight_decay=0.1,
        max_grad_norm=0.0 if clip_by == "value" else 1.0,
        per_device_train_batch_size=per_device_train_batch_size,
        per_device_eval_batch_size=per_device_eval_batch_size or per_device_train_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        bf16=bf16,
        logging_steps=logging_steps,
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps or None,
        save_strategy="steps",
        save_steps=save_steps or max_steps,
        save_total_limit=save_total_limit,
        report_to=report_to,
        seed=seed,
        data_seed=seed,
        dataloader_drop_last=True,
        dataloader_pin_memory=torch.cuda.is_available(),
        # every trainable parameter takes part in every forward (LoRA's frozen ones are not tracked): DDP need not
        # search the graph for unused ones each step, and does not warn that it searched in vain
        ddp_find_unused_parameters=False,
    )
    kwargs.update(cpu_processes_arguments())
    kwargs.update(overrides)
    if fsdp_for is not None:
        from plldr_hf.training.distributed import fsdp_arguments

        kwargs.update(fsdp_arguments(fsdp_for))
    return TrainingArguments(**kwargs)


def cpu_processes_arguments() -> dict:
    """What several processes on CPUs (torchrun, accelerate launch) need to train as one run: without `use_cpu` and
    the gloo backend every process trains alone, each one a main process."""
    import torch

    if torch.cuda.is_available() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return {}
    return {"use_cpu": True, "ddp_backend": "gloo"}


def seconds_per_step(train_metrics: dict, steps: int) -> float | None:
    """Wall seconds per optimizer step of a run: Trainer's `train_runtime` / steps (evaluation and checkpoints
    included), the one definition every report of the package uses."""
    runtime = train_metrics.get("train_runtime")
    return runtime / steps if runtime and steps else None


def translation_arguments_of(options: TranslationOptions, **overrides) -> Seq2SeqTrainingArguments:
    """The `Seq2SeqTrainingArguments` a `TranslationOptions` run trains with: the translation recipe with the
    options' values (their `trainer_args` last, then `overrides`).

    The recipe: Adam β₂ 0.98 and ε 1e-9, gradient clipping 1.0, evaluation and checkpoints by steps (two kept),
    `predict_with_generate` with greedy decoding, TensorBoard when installed and no `report_to` is given, bf16 when
    the GPU has it and `bf16` is not set. Batch sizes, learning rate, schedule, warm-up, epochs and intervals are the
    options' (their defaults live in `TranslationOptions` only).
    """
    import torch
    from transformers import Seq2SeqTrainingArguments

    options = options.resolved()
    report_to = [name for name in options.report_to if name != "none"] if options.report_to else None
    fields = dict(
        per_device_train_batch_size=options.batch_size,
        per_device_eval_batch_size=options.eval_batch_size,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
        learning_rate=options.learning_rate,
        lr_scheduler_type=options.scheduler,
        warmup_steps=options.warmup_steps,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-9,
        weight_decay=options.weight_decay,
        max_grad_norm=1.0,
        num_train_epochs=options.epochs,
        max_steps=options.max_steps if options.max_steps is not None else -1,
        eval_strategy="steps",
        eval_steps=options.eval_steps,
        save_strategy="steps",
        save_steps=options.save_steps,
        save_total_limit=2,
        logging_steps=options.logging_steps,
        predict_with_generate=True,
        generation_num_beams=1,
        report_to=(report_to or "none") if report_to is not None else _default_report_to(),
        bf16=options.bf16 if options.bf16 is not None else bf16_available(),
        dataloader_pin_memory=torch.cuda.is_available(),
        # every trainable parameter of every position encoding takes part in every forward (tested): DDP need not
        # search for unused ones, and does not warn that it searched in vain
        ddp_find_unused_parameters=False,
        seed=options.seed,
        disable_tqdm=options.no_progress,
    )
    if options.cpu:
        fields["use_cpu"] = True
    fields.update(cpu_processes_arguments())
    fields.update(options.trainer_args)
    fields.update(overrides)
    try:
        return Seq2SeqTrainingArguments(output_dir=str(options.output_dir), **fields)
    except TypeError as error:
        # an unknown trainer_args name: one line naming it, like every other bad option
        raise ValueError(f"invalid training arguments: {error}") from None


def translation_training_arguments(output_dir: str | os.PathLike, **overrides) -> Seq2SeqTrainingArguments:
    """`translation_arguments_of` the default `TranslationOptions` writing to `output_dir`, any field overridden.

    Example:
        >>> args = translation_training_arguments("runs/agf", max_steps=30, eval_steps=10)
        >>> args.lr_scheduler_type.value, args.predict_with_generate
        ('inverse_sqrt', True)
    """
    return translation_arguments_of(TranslationOptions(output_dir=str(output_dir)), **overrides)


def agf_config(
    size: str = "base",
    position_encoding: str = "agf",
    pcmv: bool = False,
    label_smoothing: float = 0.1,
    **overrides,
) -> AgfConfig:
    """An `AgfConfig` of a named size and position handling. Its vocabulary and special-token ids are the
    tokenizer's: `config.update(tokenizers.translation_token_fields(tokenizer))` once there is one.

    Args:
        size: a key of `PRESETS["agf"]`.
        position_encoding: `AgfConfig.position_encoding`.
        pcmv: `AgfConfig.pcmv` (needs `position_encoding="agf"`).
        label_smoothing: label smoothing of the training loss computed in the model's forward.
        **overrides: any other `AgfConfig` field, e.g. `dropout=0.3`, `agf_learn_base=True`.
    """
    from plldr_hf.models.agf import AgfConfig

    fields = model_fields("agf", size)
    unknown = sorted(set(overrides) - set(AgfConfig().to_dict()))
    if unknown:
        raise ValueError(f"AgfConfig has no field {', '.join(unknown)} (given as a model override, e.g. --set)")
    fields.update(position_encoding=position_encoding, pcmv=pcmv, label_smoothing=label_smoothing, **overrides)
    return AgfConfig(**fields)


def translation_recipe(options: TranslationOptions) -> tuple[Seq2SeqTrainingArguments, AgfConfig]:
    """What an AGF translation run is built from: its `Seq2SeqTrainingArguments` (`translation_arguments_of`) and
    the model config of its size and position handling (the tokenizer's vocabulary and ids are set once the run
    has one: `tokenizers.translation_token_fields`). Label smoothing belongs to the model (`options.label_smoothing`), so a
    `label_smoothing_factor` trainer argument is refused."""
    args = translation_arguments_of(options)
    if args.label_smoothing_factor:
        raise ValueError(
            f"label_smoothing_factor={args.label_smoothing_factor} would smooth the loss twice; set the model's "
            "label smoothing instead (--label-smoothing, TranslationOptions.label_smoothing: the model computes the "
            "smoothed loss)"
        )
    config = agf_config(
        options.size,
        options.position_encoding,
        options.pcmv,
        label_smoothing=options.label_smoothing,
        **options.model_overrides,
    )
    return args, config
