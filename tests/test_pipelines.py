"""`pipeline("text-generation")` and `pipeline("translation")` on both install paths.

Transformers 5 removed the "translation" task. `import plldr_hf` registers `AgfTranslationPipeline` for it, and
published AGF repos carry `pipeline_agf.py` and name it in `config.json` (`custom_pipelines`), so from the fake Hub
(`tests/hub_fixtures.py`):

- without the package: `pipeline(task, model=repo_id, trust_remote_code=True)` for both tasks;
- with the package: `pipeline("text-generation", model=repo_id)`; for translation
  `pipeline("translation", model=model, tokenizer=tokenizer)` (the registered task), or with a repo id
  `pipeline_class=AgfTranslationPipeline` (a repo id follows the repo's `custom_pipelines` entry first).

Every output must equal the same pipeline run in-process on the original model objects, which must equal
`generate()` + `decode()`.
"""

import pytest
import torch
from transformers import pipeline

from plldr_hf import AgfTranslationPipeline
from tests.hub_utils import MAX_NEW_TOKENS, PROMPTS_EN, tiny_agf, tiny_tokenizer


# the session fixtures fake_hub, published, remote_results, installed_results: one instance for all Hub tests
pytest_plugins = ["tests.hub_fixtures"]

FIXED_LENGTH = {"do_sample": False, "num_beams": 1, "max_new_tokens": MAX_NEW_TOKENS, "min_new_tokens": MAX_NEW_TOKENS}


def test_reference_pipelines_equal_generate_and_decode(published):
    refs = published.refs
    tokenizer = tiny_tokenizer()
    # text generation: the prompt, then the decoded new tokens
    prompt_ids = refs["pldrllm"]["input_ids"]
    new_text = tokenizer.decode(refs["pldrllm"]["generated"][0, prompt_ids.shape[-1] :], skip_special_tokens=True)
    assert refs["pldrllm"]["pipelines"]["single"] == [{"generated_text": PROMPTS_EN[0] + new_text}]
    assert new_text.strip()
    # translation: the decoded generation
    translation = tokenizer.decode(refs["agf"]["generated"][0], skip_special_tokens=True)
    assert refs["agf"]["pipelines"]["single"] == [{"translation_text": translation}]


@pytest.mark.parametrize("path", ["remote", "installed"])
def test_hub_pipelines_match_the_original_models(published, remote_results, installed_results, path):
    results = remote_results if path == "remote" else installed_results
    generation, translation = results["pldrllm"]["pipelines"], results["agf"]["pipelines"]
    assert generation["pipeline_class"] == "transformers.pipelines.text_generation.TextGenerationPipeline"
    if path == "remote":
        assert translation["pipeline_class"].startswith("transformers_modules.org.agf.")
        assert translation["pipeline_class"].endswith(".pipeline_agf.AgfTranslationPipeline")
    else:
        assert translation["pipeline_class"] == "plldr_hf.models.agf.pipeline_agf.AgfTranslationPipeline"
        assert translation["registered_class"] == translation["pipeline_class"]
        assert translation["registered_single"] == published.refs["agf"]["pipelines"]["single"]
    for name in ("pldrllm", "agf"):
        expected = published.refs[name]["pipelines"]
        got = results[name]["pipelines"]
        assert got["single"] == expected["single"], f"{path} {name} (one input)"
        assert got["batch"] == expected["batch"], f"{path} {name} (a list of inputs)"
    # one list of result dicts per input
    for batch in (generation["batch"], translation["batch"]):
        assert len(batch) == len(PROMPTS_EN) and all(len(item) == 1 for item in batch)


def test_translation_task_in_process_equals_generate_and_decode():
    tokenizer = tiny_tokenizer()
    model = tiny_agf(len(tokenizer))
    translator = pipeline("translation", model=model, tokenizer=tokenizer, device="cpu")
    assert isinstance(translator, AgfTranslationPipeline)

    batch = tokenizer(PROMPTS_EN[1:], return_tensors="pt")
    with torch.no_grad():
        beams = model.generate(**batch, num_beams=3, num_return_sequences=2, max_new_tokens=MAX_NEW_TOKENS)
    expected = [{"translation_text": text} for text in tokenizer.batch_decode(beams, skip_special_tokens=True)]
    # generation parameters at call time reach generate(); num_return_sequences gives that many dicts per input
    assert translator(PROMPTS_EN[1], num_beams=3, num_return_sequences=2, max_new_tokens=MAX_NEW_TOKENS) == expected


def test_generation_parameters_given_at_construction_apply_to_every_call():
    tokenizer = tiny_tokenizer()
    model = tiny_agf(len(tokenizer))
    translator = AgfTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu", **FIXED_LENGTH)
    with torch.no_grad():
        greedy = model.generate(**tokenizer(PROMPTS_EN[:1], return_tensors="pt"), **FIXED_LENGTH)
    assert translator(PROMPTS_EN[0]) == [{"translation_text": tokenizer.decode(greedy[0], skip_special_tokens=True)}]
