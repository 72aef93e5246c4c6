"""Serving engines outside transformers: the vLLM plugin (`vllm_plugin.register`, entry point
`vllm.general_plugins`) and the PLDR-LLM model written in vLLM's layers (`vllm_pldrllm`). transformers' own
continuous batching and `transformers serve` need nothing from here: the model classes support them directly.
Nothing in this package is imported by `import plldr_hf`; vLLM imports it through the entry point."""
