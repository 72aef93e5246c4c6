"""PLDR-LLM in vLLM (plugin `plldr_hf.serving`): greedy tokens equal `generate()` for prompts of mixed lengths, a
learned G is refused with a message naming `collapse()`, and `vllm serve` answers `/v1/completions`.

Opt-in (marker `vllm`; the default test command skips them): they need vLLM, which pins its own torch and
transformers, so they run in the environment `tools/make_vllm_env.sh` makes:

    bash tools/make_vllm_env.sh && .venv-vllm/bin/python -m pytest -m vllm tests/serving
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.utils import REPO_ROOT, complete_on_server, free_port, tiny_model, tiny_pldrllm_tokenizer


pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def _needs_vllm():
    # inside a fixture, not at import: the default run deselects these tests instead of reporting them skipped
    pytest.importorskip("vllm", reason="vLLM is not installed here: run `bash tools/make_vllm_env.sh`, use .venv-vllm")


HELPER = REPO_ROOT / "tests" / "serving" / "vllm_generate.py"
NEW_TOKENS = 10
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _model(folder, *, collapse=True, **overrides):
    """A tiny PLDR-LLM (head size 32, which vLLM's CPU attention supports) with the tiny word tokenizer, saved."""
    tokenizer = tiny_pldrllm_tokenizer()
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(0)
    # no end token in the model config: `generate()` then never stops or masks it (its min_new_tokens would suppress
    # the end token, which vLLM's ignore_eos does not), so both give exactly the tokens of greedy argmax
    config = dict(vocab_size=len(tokenizer), eos_token_id=None, head_dim=32, hidden_size=64, **ids)
    model = tiny_model("sdpa", **{**config, **overrides}).eval()
    with torch.no_grad():
        # every bias and LayerNorm off its zero / one init, as in a trained model: a bias dropped or misplaced by the
        # vLLM model then changes the tokens (the LM head's bias once was)
        for name, param in model.named_parameters():
            if name.endswith("bias") or "layernorm" in name:
                param.add_(torch.randn_like(param) * 0.5)
    if collapse:
        model.collapse(force=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def _prompts():
    generator = torch.Generator().manual_seed(1)
    lengths = [1, 3, 5, 8, 13, 21, 2, 17]
    return [torch.randint(4, 19, (n,), generator=generator).tolist() for n in lengths]


def _vllm(folder, prompts):
    out = folder / "vllm_tokens.json"
    proc = subprocess.run(
        [sys.executable, str(HELPER), str(folder), json.dumps(prompts), str(NEW_TOKENS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
        cwd=REPO_ROOT,
    )
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


@pytest.mark.parametrize("kind", ["collapsed-interleaved-rope", "collapsed-neox-rope", "predefined-random-G"])
def test_vllm_greedy_tokens_equal_generate(tmp_path, kind):
    overrides = {
        "collapsed-interleaved-rope": dict(reference_rope=True),
        "collapsed-neox-rope": dict(reference_rope=False),
        "predefined-random-G": dict(custom_G_type="random"),
    }[kind]
    model = _model(tmp_path, collapse=kind.startswith("collapsed"), **overrides)
    prompts = _prompts()
    proc, got = _vllm(tmp_path, prompts)
    assert proc.returncode == 0, proc.stderr[-4000:]
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)
            expected.append(out[0, len(prompt) :].tolist())
    assert got == expected


@pytest.mark.parametrize(
    "kind, message",
    [("learned-G", ("serves a fixed G only", "collapse(")), ("head-size-16", ("head_dim=16", "plldr-hf serve"))],
)
def test_vllm_refuses_what_it_cannot_serve_at_load(tmp_path, kind, message):
    """A learned G (the message names `collapse()`), and a head size vLLM's CPU attention lacks (it would otherwise
    start and fail on the first request)."""
    if kind == "learned-G":
        _model(tmp_path, collapse=False)
    else:
        _model(tmp_path, head_dim=16, hidden_size=32)
    proc, got = _vllm(tmp_path, [[4, 5, 6]])
    assert proc.returncode != 0 and got is None
    log = proc.stdout + proc.stderr  # the engine process logs the error to stdout
    assert all(part in log for part in message), log[-3000:]


def test_vllm_serve_answers_a_completion_like_generate(tmp_path):
    model = _model(tmp_path)
    tokenizer = tiny_pldrllm_tokenizer()
    prompt = "the cat sat on a mat and"
    batch = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        new = model.generate(**batch, max_new_tokens=6, do_sample=False)[0, batch["input_ids"].shape[1] :]
    port = free_port()
    vllm = os.path.join(os.path.dirname(sys.executable), "vllm")
    argv = [vllm, "serve", str(tmp_path), "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    argv += ["--max-model-len", "64", "--gpu-memory-utilization", "0.1", "--enforce-eager"]
    payload = {"model": str(tmp_path), "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    answer = complete_on_server(argv, port, payload, env=ENV, startup_s=300)
    assert answer["object"] == "text_completion"
    assert answer["usage"]["completion_tokens"] == 6
    assert answer["choices"][0]["text"].strip() == tokenizer.decode(new, skip_special_tokens=True).strip()
