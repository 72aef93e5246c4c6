"""vLLM general plugin: registers PLDR-LLM with vLLM's model registry.

vLLM calls `register()` in every process it starts (entry point group `vllm.general_plugins`, see
https://docs.vllm.ai/en/latest/design/plugin_system.html), so it must be cheap and idempotent. Importing
`plldr_hf` registers `PldrllmConfig` and the tokenizer with the transformers Auto classes, so vLLM reads a saved
folder without `trust_remote_code`; the model class itself is registered lazily by its import path.
"""

ARCHITECTURE = "PldrllmForCausalLM"
MODEL_PATH = "plldr_hf.serving.vllm_pldrllm:PldrllmForCausalLM"


def register() -> None:
    from vllm import ModelRegistry

    import plldr_hf  # noqa: F401  (Auto-class registration of config and tokenizer)

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_PATH)
