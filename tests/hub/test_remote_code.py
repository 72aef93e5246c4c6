"""Loading what was published, on both install paths, reproduces the original models.

The repos pushed to the loopback fake Hub by `tests/hub_utils.published` (a collapsed PLDR-LLM and an AGF / PCM-V
model) are loaded in fresh interpreters by `tests/hub_loader.py`:

- without the package: `plldr_hf` cannot be imported (the editable-install finder and its `sys.path` entry are
  removed and the name is blocked), and `from_pretrained(repo_id, trust_remote_code=True)` runs the uploaded files;
- with the package imported: `from_pretrained(repo_id)` without `trust_remote_code` uses the registered classes.

Both must give the original logits (to 1e-6) and the same fixed-length greedy generations.
"""

import torch

from tests.hub_utils import MAX_NEW_TOKENS
from tests.utils import assert_close


# the session fixtures fake_hub, published, remote_results, installed_results: one instance for all Hub tests
pytest_plugins = ["tests.hub_fixtures"]


def _assert_same_outputs(results: dict, refs: dict) -> None:
    for name in ("pldrllm", "agf"):
        got, ref = results[name], refs[name]
        assert torch.equal(got["input_ids"], ref["input_ids"]), name
        assert_close(f"{name} logits", ref["logits"], got["logits"], atol=1e-6, rtol=0)
        assert torch.equal(got["generated"], ref["generated"]), f"{name}: greedy generation differs"
    # fixed-length greedy runs: prompt + new tokens (causal), decoder start + new tokens (seq2seq)
    assert results["pldrllm"]["generated"].shape[-1] == refs["pldrllm"]["input_ids"].shape[-1] + MAX_NEW_TOKENS
    assert results["agf"]["generated"].shape[-1] == 1 + MAX_NEW_TOKENS
    assert results["pldrllm"]["collapsed"] is True
    assert results["pldrllm"]["state_dict_keys"] == refs["pldrllm"]["state_dict_keys"]


def test_remote_code_load_without_the_package_reproduces_the_original(published, remote_results):
    assert remote_results["package_importable"] is False
    assert remote_results["on_sys_path"] is False
    assert remote_results["editable_finders"] == []
    assert remote_results["plldr_hf_modules"] == []
    for name in ("pldrllm", "agf"):
        assert remote_results[name]["model_class"].startswith("transformers_modules.org."), name
    # `auto_map` names the base model too: AutoModel loads it from the uploaded files, with the head's weights
    assert remote_results["pldrllm"]["base_model_class"].endswith("modeling_pldrllm.PldrllmModel")
    assert remote_results["agf"]["base_model_class"].endswith("modeling_agf.AgfModel")
    assert remote_results["pldrllm"]["base_model_same_weights"] and remote_results["agf"]["base_model_same_weights"]
    _assert_same_outputs(remote_results, published.refs)


def test_installed_package_loads_without_trust_remote_code(published, installed_results):
    assert installed_results["package_importable"] is True
    assert installed_results["pldrllm"]["model_class"] == "plldr_hf.models.pldrllm.modeling_pldrllm.PldrllmForCausalLM"
    assert installed_results["agf"]["model_class"] == "plldr_hf.models.agf.modeling_agf.AgfForConditionalGeneration"
    _assert_same_outputs(installed_results, published.refs)
