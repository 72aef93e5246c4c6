"""The model configs of the named sizes (the recipes' `model`; their training settings are the options classes'
defaults, `plldr_hf.training.options`).

- PLDR-LLM: `pldrllm_config` (the sizes of `PRESETS["pldrllm"]`) and `llama_config_like` (the baseline of the same
  width and depth), `causal_lm_config(options)` (a run's);
- AGF: `agf_config` (the sizes of `PRESETS["agf"]`; the named position variants of the paper's comparison are
  `plldr_hf.models.agf.position_encodings.POSITION_VARIANTS`).

Shared: `seconds_per_step` (the one definition of s/step every report uses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plldr_hf.training.presets import preset


if TYPE_CHECKING:
    from plldr_hf.models.agf import AgfConfig

__all__ = ["agf_config", "causal_lm_config", "llama_config_like", "model_fields", "pldrllm_config", "seconds_per_step"]


def model_fields(family: str, size: str) -> dict:
    """The model config fields of a size: a shipped recipe's name or a recipe file (`presets.preset`)."""
    return dict(preset(family, size)["model"])


def causal_lm_config(options):
    """The model config of a PLDR-LLM run (`TrainOptions`; or its Llama baseline): its size's, with the vocabulary asked for (the run
    sets the tokenizer's own size once it has one; a fine-tune trains the base model's config instead)."""
    vocab_size = options.vocab_size or preset("pldrllm", options.size)["run"]["vocab_size"]
    config = pldrllm_config(
        options.size, vocab_size, max_position_embeddings=options.block_size, dag_loss_form=options.dag_form
    )
    return llama_config_like(config) if options.architecture == "llama" else config


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


def seconds_per_step(train_metrics: dict, steps: int) -> float | None:
    """Wall seconds per optimizer step of a run: Trainer's `train_runtime` / steps (evaluation and checkpoints
    included), the one definition every report of the package uses."""
    runtime = train_metrics.get("train_runtime")
    return runtime / steps if runtime and steps else None


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
