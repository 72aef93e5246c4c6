"""`plldr-hf serve`: transformers' own OpenAI-compatible server with continuous batching answers a completion request
for a collapsed PLDR-LLM with the tokens `generate()` gives (loopback only, one request, bounded in time), started as
the console script; a chat request without a chat template is a 400 that says so; the server exits soon after
Ctrl-C."""

import os
import shutil
import sys

import pytest
import torch

from plldr_hf.models.pldrllm.modeling_pldrllm import CONTINUOUS_BATCHING_SUPPORTED
from tests.utils import complete_on_server, free_port, tiny_model, tiny_pldrllm_tokenizer


@pytest.mark.skipif(
    not CONTINUOUS_BATCHING_SUPPORTED,
    reason="continuous batching needs transformers >= 5.24 (the serving extra's floor)",
)
def test_transformers_serve_with_continuous_batching_answers_like_generate(tmp_path):
    tokenizer = tiny_pldrllm_tokenizer()
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    model = tiny_model("sdpa", vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, **ids).eval()
    model.collapse(force=True)
    folder = tmp_path / "collapsed"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    # a prompt whose greedy continuation is not the end token at once, so the answer has text to compare
    expected = None
    for prompt in ("the cat sat", "a dog ran far", "the bird sang over the hill", "a cat and a dog"):
        batch = tokenizer(prompt, return_tensors="pt")
        with torch.no_grad():
            new = model.generate(**batch, max_new_tokens=6, do_sample=False)[0, batch["input_ids"].shape[1] :]
        if len(new) >= 3 and new[0] != tokenizer.eos_token_id:
            expected = prompt, tokenizer.decode(new, skip_special_tokens=True)
            break
    assert expected is not None, "no test prompt with a continuation"

    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # the console script itself, as the README runs it (its imports differ from `python -m plldr_hf`)
    script = shutil.which("plldr-hf", path=os.path.dirname(sys.executable)) or shutil.which("plldr-hf")
    assert script is not None, "the plldr-hf console script is not installed"
    argv = [script, "serve", str(folder), "--continuous-batching"]
    # a small paged cache (transformers sizes it from the machine's free memory otherwise)
    argv += ["--cb-num-blocks", "16", "--cb-max-batch-tokens", "256"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    payload = {"model": str(folder), "prompt": expected[0], "max_tokens": 6, "temperature": 0}
    chat = {"model": str(folder), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answer = complete_on_server(argv, port, payload, env=env, ctrl_c_exit_s=30, also={"/v1/chat/completions": chat})
    # a base model has no chat template: a client error that says so, not a bare 500
    status, body = answer["also"]["/v1/chat/completions"]
    assert status == 400 and "no chat template" in body["error"]["message"]
    assert answer["object"] == "text_completion"
    assert answer["choices"][0]["text"].strip() == expected[1].strip()
    assert answer["usage"]["completion_tokens"] >= 3


@pytest.mark.skipif(
    not CONTINUOUS_BATCHING_SUPPORTED,
    reason="continuous batching needs transformers >= 5.24 (the serving extra's floor)",
)
@pytest.mark.parametrize("continuous_batching", [False, True], ids=["plain", "continuous_batching"])
def test_bad_requests_get_a_4xx_naming_the_field_and_the_server_stays_up(tmp_path, continuous_batching):
    """The load test of `benchmarks/serve_load.py`, smaller: 60 concurrent requests, a third of them bad across every
    checked field."""
    from benchmarks.serve_load import bad_requests, make_model, run_load

    folder = tmp_path / "collapsed"
    expected = make_model(folder, positions=32)
    requests = 3 * len(bad_requests(str(folder), 32))  # every bad case once
    result = run_load(str(folder), expected, 32, requests=requests, continuous_batching=continuous_batching, workers=8)
    assert result["bad_ok"] == result["bad"] == requests // 3, result["problems"]
    assert result["good_ok"] == result["good"], result["problems"]
    assert result["alive"]


def test_serve_refuses_a_missing_model_and_a_folder_that_is_not_one(tmp_path):
    from plldr_hf.cli import main

    assert main(["serve"]) == 2
    with pytest.raises(SystemExit) as refused:  # argparse: options before MODEL are not MODEL [OPTIONS]
        main(["serve", "--port", "8000"])
    assert refused.value.code == 2
    (tmp_path / "empty").mkdir()
    assert main(["serve", str(tmp_path / "empty")]) == 2
    assert main(["serve", str(tmp_path / "missing")]) == 2
