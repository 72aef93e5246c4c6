"""PLDR-LLM family (model_type `pldrllm`): registration with the Auto classes and for Hub remote code, and the
family's descriptor `FAMILY` (`plldr_hf.models.family.ModelFamily`).

The folder holds two kinds of module:

- remote code, copied next to the weights by `save_pretrained` and importing only torch, transformers and each
  other: `configuration_pldrllm.py`, `modeling_pldrllm.py` and its siblings `plga.py`, `fused_units.py`, `dag.py`,
  `collapse.py`, `layout.py`, `g_cache.py`, `outputs.py`, and the configuration's sibling `tensor_parallel.py`
  (`FAMILY.code_files` lists them);
- the package side, which may use the rest of `plldr_hf` but never training or the command line: the tokenizer, the
  question-answering pipeline, `conversion.py` (released `.pth` and predefined-G files), `diagnostics.py` (order
  parameters and the other checks of G), `plots.py` (their PNGs) and `lm_eval_task.py` (an offline lm-eval task).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from plldr_hf._compat import register_question_answering_pipeline, register_tokenizer_for_model_type
from plldr_hf.models.family import ModelCard, ModelFamily
from plldr_hf.models.pldrllm.configuration_pldrllm import PldrllmConfig
from plldr_hf.models.pldrllm.modeling_pldrllm import (
    PldrllmCacheLayer,
    PldrllmDecoderLayer,
    PldrllmForCausalLM,
    PldrllmForQuestionAnswering,
    PldrllmForSequenceClassification,
    PldrllmForTokenClassification,
    PldrllmModel,
    PldrllmPreTrainedModel,
)
from plldr_hf.models.pldrllm.pipeline_pldrllm import ExtractiveQuestionAnsweringPipeline
from plldr_hf.models.pldrllm.tokenization_pldrllm import PldrllmTokenizer


# exist_ok=False: if core transformers ever ships `pldrllm`, importing plldr_hf fails loudly instead of shadowing
AutoConfig.register("pldrllm", PldrllmConfig)
AutoModel.register(PldrllmConfig, PldrllmModel)
AutoModelForCausalLM.register(PldrllmConfig, PldrllmForCausalLM)
# the released task heads (fine-tuned checkpoints of them are published, e.g. v52-81M-FT-SC-1 / FT-TC-1)
AutoModelForSequenceClassification.register(PldrllmConfig, PldrllmForSequenceClassification)
AutoModelForTokenClassification.register(PldrllmConfig, PldrllmForTokenClassification)
AutoModelForQuestionAnswering.register(PldrllmConfig, PldrllmForQuestionAnswering)

# released folders name LlamaTokenizerFast, which transformers 5 builds as BPE: route them to the exact unigram one
register_tokenizer_for_model_type("pldrllm", PldrllmConfig, PldrllmTokenizer)

# transformers 5 dropped the built-in "question-answering" task; ours serves any start/end-logit QA head
register_question_answering_pipeline(ExtractiveQuestionAnsweringPipeline)

# save_pretrained / push_to_hub then copy the two model files and write the released `auto_map`
PldrllmConfig.register_for_auto_class()
PldrllmModel.register_for_auto_class("AutoModel")
PldrllmForCausalLM.register_for_auto_class("AutoModelForCausalLM")
PldrllmForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
PldrllmForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
PldrllmForQuestionAnswering.register_for_auto_class("AutoModelForQuestionAnswering")


def _card_architecture(config: PldrllmConfig) -> list[tuple[str, object]]:
    if config.custom_G_type is not None:
        g_state = f"fixed G (`custom_G_type={config.custom_G_type!r}`)"
    elif config.collapsed:
        g_state = "collapsed: G frozen per layer and head, attention runs as SDPA with q' = q·G"
    else:
        g_state = "learned: G computed by the power-law graph attention metric learner"
    return [
        ("layers", config.num_hidden_layers),
        ("hidden size", config.hidden_size),
        ("attention heads × head dim", f"{config.num_attention_heads} × {config.head_dim}"),
        ("feed-forward size", config.intermediate_size),
        (
            "metric learner (A_dff, residual layers, dense layers)",
            (config.A_dff, config.num_reslayerA, config.num_denseA),
        ),
        ("context length", config.max_position_embeddings),
        ("RoPE", "interleaved (v51 reference)" if config.reference_rope else "half-split (v52)"),
        ("G", g_state),
    ]


FAMILY = ModelFamily(
    model_type="pldrllm",
    display_name="PLDR-LLM",
    auto_class="AutoModelForCausalLM",
    config_class=PldrllmConfig,
    model_class=PldrllmForCausalLM,
    decoder_layer_class=PldrllmDecoderLayer,
    card=ModelCard(
        template="pldrllm.md",
        pipeline_tag="text-generation",
        task_name="Text Generation",
        tags=("pldr-llm", "power-law-graph-attention", "custom_code"),
        language=("en",),
        metric_names={
            "perplexity": "Perplexity",
            "order_parameter_across_inputs_max_over_layers": "Order parameter of G_LM (SOC, across the calibration "
            "inputs, max over layers)",
            "order_parameter_prompt_vs_continuation_max_over_layers": "Order parameter of G_LM (SOC, prompt vs prompt "
            "+ continuation, max over layers)",
            "loss": "Cross-entropy loss",
        },
        architecture=_card_architecture,
        config_tags=lambda config: ["collapsed"] if config.collapsed else [],
    ),
    # PEFT's usual choice for attention models (q and v); the metric learner (`reslayerAs.*`) and the PLGA tensors
    # are adapted only when a LoraConfig names them (examples/lora_finetune_pldr_llm.py)
    lora_target_modules=("wq", "wv"),
)

__all__ = [
    "PldrllmConfig",
    "PldrllmTokenizer",
    "PldrllmPreTrainedModel",
    "PldrllmModel",
    "PldrllmForCausalLM",
    "PldrllmForSequenceClassification",
    "PldrllmForTokenClassification",
    "PldrllmForQuestionAnswering",
    "PldrllmCacheLayer",
]
