"""vLLM general plugin: registers PLDR-LLM with vLLM's model registry.

vLLM calls `register()` in every process it starts (entry point group `vllm.general_plugins`, see
https://docs.vllm.ai/en/latest/design/plugin_system.html), so it must be cheap and idempotent. Importing
`plldr_hf` registers `PldrllmConfig` and the tokenizer with the transformers Auto classes, so vLLM reads a saved
folder without `trust_remote_code`; the model class itself is registered lazily by its import path. The settings a
learned G needs and the checks of vLLM's Transformers backend (`vllm_g_state.PldrllmVllmConfig`) join vLLM's
per-architecture config hooks, which vLLM applies when it makes an engine's config.
"""

ARCHITECTURE = "PldrllmForCausalLM"
MODEL_PATH = "plldr_hf.serving.vllm_pldrllm:PldrllmForCausalLM"
TRANSFORMERS_BACKEND = "TransformersForCausalLM"


def register() -> None:
    from vllm import ModelRegistry

    import plldr_hf.models  # noqa: F401  (Auto-class registration of config and tokenizer)
    from plldr_hf.models.pldrllm.configuration_pldrllm import PldrllmConfig

    PldrllmConfig.layer_types = property(vllm_layer_types)

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_PATH)
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    from .vllm_g_state import PldrllmVllmConfig

    # the hook acts on PLDR-LLM folders only; vLLM has none of its own for its Transformers backend's class
    for architecture in (ARCHITECTURE, TRANSFORMERS_BACKEND):
        MODELS_CONFIG_MAP.setdefault(architecture, PldrllmVllmConfig)
    _name_the_head_for_the_transformers_backend()


def vllm_layer_types(config) -> list[str]:
    """`layer_types` of a PLDR-LLM config as vLLM reads it, set on the config class in vLLM's processes only.

    vLLM decides per folder whether a model that can keep per-request state is a hybrid: all layers "full_attention"
    (a fixed G) means a plain transformer; no `layer_types` means a hybrid (a learned G, whose G cache is per-request
    state). transformers also reads the attribute (its presence makes `generate` hand a model a dict of masks), so the
    attribute is not part of `PldrllmConfig` itself; a learned G raises AttributeError, which `getattr` and `hasattr`
    read as absent."""
    if not config.has_fixed_G:
        raise AttributeError("layer_types: a learned-G PLDR-LLM's layers also keep a per-request G state")
    return ["full_attention"] * config.num_hidden_layers


def _name_the_head_for_the_transformers_backend() -> None:
    """vLLM's Transformers backend (`model_impl="transformers"`) builds the base model and an LM head of its own,
    `lm_head` (a bias included); PLDR-LLM's head is `final_layer`. A renaming registered for the base model class
    maps the one onto the other there; transformers scopes a sub-model's renamings to its prefix, so loading
    `PldrllmForCausalLM` (whose `final_layer` is outside the base model `decoder`) is unaffected."""
    from transformers.conversion_mapping import register_checkpoint_conversion_mapping
    from transformers.core_model_loading import WeightRenaming

    register_checkpoint_conversion_mapping("PldrllmModel", [WeightRenaming("final_layer", "lm_head")], overwrite=True)
