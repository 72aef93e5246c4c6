"""PLDR-LLM family (model_type `pldrllm`): registration with the Auto classes and for Hub remote code."""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from plldr_hf.hub import install_push_to_hub
from plldr_hf.models.pldrllm.configuration_pldrllm import PldrllmConfig
from plldr_hf.models.pldrllm.modeling_pldrllm import (
    PldrllmCacheLayer,
    PldrllmForCausalLM,
    PldrllmModel,
    PldrllmPreTrainedModel,
)


# exist_ok=False: if core transformers ever ships `pldrllm`, importing plldr_hf fails loudly instead of shadowing
AutoConfig.register("pldrllm", PldrllmConfig)
AutoModel.register(PldrllmConfig, PldrllmModel)
AutoModelForCausalLM.register(PldrllmConfig, PldrllmForCausalLM)

# save_pretrained / push_to_hub then copy the two model files and write the released `auto_map`
PldrllmConfig.register_for_auto_class()
PldrllmModel.register_for_auto_class("AutoModel")
PldrllmForCausalLM.register_for_auto_class("AutoModelForCausalLM")

# `model.push_to_hub(repo_id, tokenizer=..., card=...)` publishes the full repo (tokenizer, rendered model card)
install_push_to_hub(PldrllmPreTrainedModel)

__all__ = ["PldrllmConfig", "PldrllmPreTrainedModel", "PldrllmModel", "PldrllmForCausalLM", "PldrllmCacheLayer"]
