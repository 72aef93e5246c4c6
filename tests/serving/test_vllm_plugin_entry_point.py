"""The vLLM plugin is declared where vLLM looks for it (entry point group `vllm.general_plugins`) and points at a
callable; what it registers is tested with vLLM itself (`test_vllm.py`, opt-in)."""

from importlib.metadata import entry_points


def test_the_package_declares_its_vllm_plugin():
    (plugin,) = [e for e in entry_points(group="vllm.general_plugins") if e.value.startswith("plldr_hf.")]
    register = plugin.load()  # imports no vLLM until called
    assert callable(register) and register.__module__ == "plldr_hf.serving.vllm_plugin"
    from plldr_hf import PldrllmForCausalLM
    from plldr_hf.serving.vllm_plugin import ARCHITECTURE, MODEL_PATH

    # vLLM picks the model by the `architectures` entry that save_pretrained writes: the class name
    assert ARCHITECTURE == PldrllmForCausalLM.__name__
    module, _, name = MODEL_PATH.partition(":")
    assert module == "plldr_hf.serving.vllm_pldrllm" and name == ARCHITECTURE
