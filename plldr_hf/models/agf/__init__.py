"""AGF / PCM-V translation Transformer (model_type `agf`, issue 5).

Importing this package registers the family with the Auto classes in-process, and marks the classes for
`register_for_auto_class`, so `save_pretrained` / `push_to_hub` write an `auto_map` and copy
`configuration_agf.py` and `modeling_agf.py` next to the weights for `trust_remote_code` loading.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from plldr_hf._compat import register_translation_pipeline

from .configuration_agf import AgfConfig
from .modeling_agf import AgfForConditionalGeneration, AgfModel, AgfPreTrainedModel
from .pipeline_agf import AgfTranslationPipeline


# exist_ok=False: a future core transformers model called "agf" must fail loudly, not shadow either side
AutoConfig.register("agf", AgfConfig)
AutoModel.register(AgfConfig, AgfModel)
AutoModelForSeq2SeqLM.register(AgfConfig, AgfForConditionalGeneration)

AgfConfig.register_for_auto_class()
AgfModel.register_for_auto_class("AutoModel")
AgfForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

# transformers 5 dropped the built-in "translation" task; ours serves any seq2seq model with a tokenizer
register_translation_pipeline(AgfTranslationPipeline)

__all__ = ["AgfConfig", "AgfPreTrainedModel", "AgfModel", "AgfForConditionalGeneration", "AgfTranslationPipeline"]
