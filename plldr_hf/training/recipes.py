"""Training recipes: the named model sizes and the `TrainingArguments` each family is trained with.

PLDR-LLM:

- `SIZES` / `pldrllm_config` (named sizes `tiny`, `mini`, `small`, `110m`), `llama_config_like` (the baseline of
  the same width and depth);
- `reference_training_arguments` — the reference recipe (github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality; arXiv 2603.23539): AdamW (0.9, 0.95), eps 1e-5, weight
  decay 0.1 on every parameter, clipping by value 1.0, linear warm-up then cosine to 10 % of the peak through the
  stock `cosine_with_min_lr` scheduler, bf16 where the GPU supports it.

AGF translation Transformer:

- `MODEL_SIZES` / `build_agf_config` (sizes `tiny`, `small`, `base`); the named position variants of the paper's
  comparison are `plldr_hf.models.agf.position_encodings.POSITION_VARIANTS`;
- `translation_training_arguments` — Adam (β₂ 0.98, ε 1e-9), inverse-square-root decay after a linear warm-up
  (Vaswani et al., arXiv 1706.03762, §5).

Shared: `bf16_available`, `seconds_per_step` (the one definition of s/step every report uses).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, Seq2SeqTrainingArguments

    from plldr_hf.models.agf import AgfConfig


__all__ = [
    "SIZES",
    "MODEL_SIZES",
    "bf16_available",
    "build_agf_config",
    "llama_config_like",
    "pldrllm_config",
    "reference_training_arguments",
    "seconds_per_step",
    "translation_training_arguments",
]

# named model sizes: config fields plus training defaults (block length, per-device batch, tokenizer vocabulary)
SIZES = {
    # seconds on a CPU; for smoke tests and examples
    "tiny": {
        "model": dict(
            hidden_size=64,
            num_attention_heads=4,
            head_dim=16,
            num_hidden_layers=2,
            intermediate_size=170,
            A_dff=42,
            num_reslayerA=2,
            num_denseA=2,
        ),
        "block_size": 64,
        "batch_size": 8,
        "vocab_size": 1024,
        "learning_rate": 1e-3,
    },
    # minutes on a CPU (the quickstart): 2 layers, 4 heads × 32, a 4-unit metric learner of 32→85→32 GLUs
    "mini": {
        "model": dict(
            hidden_size=128,
            num_attention_heads=4,
            head_dim=32,
            num_hidden_layers=2,
            intermediate_size=341,
            A_dff=85,
            num_reslayerA=4,
            num_denseA=2,
        ),
        "block_size": 128,
        "batch_size": 8,
        "vocab_size": 2048,
        "learning_rate": 1e-3,
    },
    # the released per-head PLGA (d = 64, 8 residual units of 64→170→64 GLUs) in a 4-layer, 256-wide model;
    # about 5 s per step on a 2-core CPU (a Llama of the same shape: about 1.5 s)
    "small": {
        "model": dict(
            hidden_size=256,
            num_attention_heads=4,
            head_dim=64,
            num_hidden_layers=4,
            intermediate_size=682,
            A_dff=170,
            num_reslayerA=8,
            num_denseA=2,
        ),
        "block_size": 256,
        "batch_size": 4,
        "vocab_size": 4096,
        "learning_rate": 1e-3,
    },
    # the released 110M v51 architecture (the released `config.json` of fromthesky/PLDR-LLM-v51-110M-1); vocabulary from the tokenizer
    "110m": {
        "model": dict(
            hidden_size=896,
            num_attention_heads=14,
            head_dim=64,
            num_hidden_layers=5,
            intermediate_size=2389,
            A_dff=170,
            num_reslayerA=8,
            num_denseA=2,
        ),
        "block_size": 1024,
        "batch_size": 16,
        "vocab_size": 32000,
        "learning_rate": 1e-3,
    },
}


# named model sizes; "base" is Transformer-base (arXiv 1706.03762) at the AGF paper's depth 3, the others are for CPU
MODEL_SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64),
    "small": dict(d_model=128, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512),
    "base": dict(d_model=512, encoder_layers=3, decoder_layers=3, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
}  # fmt: skip


def bf16_available() -> bool:
    """Whether training can use bf16 mixed precision: a CUDA device that supports it (CPU runs float32)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def _tensorboard_available() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def pldrllm_config(
    size: str,
    vocab_size: int,
    *,
    max_position_embeddings: int | None = None,
    dag_weights: Sequence[float] = (0.0, 0.0, 0.0),
    dag_loss_form: str = "log_ratio",
    **overrides,
):
    """`PldrllmConfig` of a named size (a key of `SIZES`) with the vocabulary of the tokenizer.

    Example:
        >>> pldrllm_config("tiny", 1024).hidden_size
        64
    """
    from plldr_hf import PldrllmConfig

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    preset = SIZES[size]
    fields = dict(preset["model"])
    fields.update(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings or preset["block_size"],
        dag_weight_a_lm=float(dag_weights[0]),
        dag_weight_a_p=float(dag_weights[1]),
        dag_weight_g_lm=float(dag_weights[2]),
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
    **overrides,
):
    """`TrainingArguments` with the reference recipe (github.com/burcgokden/PLDR-LLM-Self-Organized-Criticality; arXiv 2603.23539) as defaults.

    AdamW β = (0.9, 0.95), eps 1e-5, weight decay 0.1 (apply it to every parameter with
    `PldrTrainer(decay_all_parameters=True)`), linear warm-up to `learning_rate` then cosine decay to 10 % of it
    at `max_steps` (the stock `cosine_with_min_lr` scheduler with `min_lr_rate=0.1`), bf16 when the GPU supports
    it. `clip_by="value"` turns Trainer's norm clipping off (`max_grad_norm=0`) for `ClipGradValueCallback(1.0)`;
    `"norm"` clips by norm 1.0. On CPU with several processes (torchrun) DDP uses gloo.

    `warmup_steps=None` takes 10 % of `max_steps`, at most the reference's 2000.
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
    )
    if not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # multi-process CPU DDP (torchrun) needs both, otherwise every process trains alone (accelerate reads both from the launcher's environment)
        kwargs.update(use_cpu=True, ddp_backend="gloo")
    kwargs.update(overrides)
    return TrainingArguments(**kwargs)


def seconds_per_step(train_metrics: dict, steps: int) -> float | None:
    """Wall seconds per optimizer step of a run: Trainer's `train_runtime` / steps (evaluation and checkpoints
    included), the one definition every report of the package uses."""
    runtime = train_metrics.get("train_runtime")
    return runtime / steps if runtime and steps else None


def translation_training_arguments(output_dir: str | os.PathLike, **overrides) -> Seq2SeqTrainingArguments:
    """`Seq2SeqTrainingArguments` with the translation recipe's defaults; any field can be overridden.

    Defaults: batch 32, learning rate 5e-4 with `inverse_sqrt` decay after 1000 linear warm-up steps, Adam β₂ 0.98
    and ε 1e-9, gradient clipping 1.0, 10 epochs, evaluation / checkpoint every 1000 steps (two kept), logging every
    50 steps, `predict_with_generate` with greedy decoding, TensorBoard when installed, bf16 when the GPU has it.

    Example:
        >>> args = translation_training_arguments("runs/agf", max_steps=30, eval_steps=10)
        >>> args.lr_scheduler_type.value, args.predict_with_generate
        ('inverse_sqrt', True)
    """
    import torch
    from transformers import Seq2SeqTrainingArguments

    defaults = dict(
        per_device_train_batch_size=32,
        per_device_eval_batch_size=64,
        learning_rate=5e-4,
        lr_scheduler_type="inverse_sqrt",
        warmup_steps=1000,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-9,
        weight_decay=0.0,
        max_grad_norm=1.0,
        num_train_epochs=10,
        eval_strategy="steps",
        eval_steps=1000,
        save_strategy="steps",
        save_steps=1000,
        save_total_limit=2,
        logging_steps=50,
        predict_with_generate=True,
        generation_num_beams=1,
        report_to=["tensorboard"] if _tensorboard_available() else "none",
        bf16=bf16_available(),
        dataloader_pin_memory=torch.cuda.is_available(),
        seed=42,
    )
    defaults.update(overrides)
    return Seq2SeqTrainingArguments(output_dir=str(output_dir), **defaults)


def build_agf_config(
    tokenizer: PreTrainedTokenizerBase,
    size: str = "base",
    position_encoding: str = "agf",
    pcmv: bool = False,
    label_smoothing: float = 0.1,
    **overrides,
) -> AgfConfig:
    """An `AgfConfig` of a named size whose vocabulary and special-token ids come from `tokenizer`.

    Args:
        tokenizer: the joint tokenizer (sets `vocab_size`, pad / bos / eos ids; decoding starts with `<s>`).
        size: a key of `MODEL_SIZES`.
        position_encoding: `AgfConfig.position_encoding`.
        pcmv: `AgfConfig.pcmv` (needs `position_encoding="agf"`).
        label_smoothing: label smoothing of the training loss computed in the model's forward.
        **overrides: any other `AgfConfig` field, e.g. `dropout=0.3`, `agf_learn_base=True`.
    """
    from plldr_hf.models.agf import AgfConfig

    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; choose one of {sorted(MODEL_SIZES)}")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if getattr(tokenizer, name) is None:
            raise ValueError(f"the tokenizer has no {name[:-3]}; translation needs <pad>, <s> and </s> tokens")
    fields = dict(MODEL_SIZES[size])
    fields.update(
        vocab_size=len(tokenizer),
        position_encoding=position_encoding,
        pcmv=pcmv,
        label_smoothing=label_smoothing,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    fields.update(overrides)
    return AgfConfig(**fields)
