"""PLDR-LLM family (model_type `pldrllm`): registration with the Auto classes and for Hub remote code."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from plldr_hf._compat import register_question_answering_pipeline, register_tokenizer_for_model_type
from plldr_hf.models.pldrllm.configuration_pldrllm import PldrllmConfig
from plldr_hf.models.pldrllm.modeling_pldrllm import (
    PldrllmCacheLayer,
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
