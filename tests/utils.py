"""What the tests share: paths, the one tiny configuration of each family, tiny tokenizers, assertion helpers, and
runners for the properties both families must have (cache vs no cache, save / load, padding).

Test modules import from here (and from the helper modules `hub_utils`, `hub_loader`, `ddp_one_step`), never from
each other or from `conftest.py`.
"""

from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError

from plldr_hf import AgfConfig, AgfForConditionalGeneration, PldrllmConfig, PldrllmForCausalLM


# what a refused config value raises: transformers' `@strict` validation (field types and ranges, the checks between
# fields), or a ValueError for what is checked before it (the dtype name, the RoPE type)
CONFIG_ERRORS = (StrictDataclassError, ValueError)


REPO_ROOT = Path(__file__).resolve().parents[1]
# every file a test reads lives inside the repo (tests/fixtures/README.md gives sources and licences), so the tests
# pass on a plain clone
FIXTURES = REPO_ROOT / "tests" / "fixtures"
# special ids of the tiny translation models and `tiny_translation_tokenizer`
PAD, BOS, EOS = 0, 1, 2


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """`torch.testing.assert_close` with a message that reports the max and mean absolute difference."""
    ref, out = ref.detach(), out.detach()
    assert ref.shape == out.shape, f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
    diff = (ref.double() - out.double()).abs()
    msg = (
        f"{name}: max |diff| {diff.max().item():.3e}, mean |diff| {diff.mean().item():.3e} (atol {atol}, rtol {rtol})"
    )
    torch.testing.assert_close(out.to(ref.dtype), ref, atol=atol, rtol=rtol, msg=msg)


def tiny_config(dag_weights=(0.0, 0.0, 0.0), **overrides) -> PldrllmConfig:
    """The tiny PLDR-LLM of the tests: 2 layers × 32 wide, 2 heads × 16, a 2-unit metric learner of 16→8→16 GLUs;
    `dag_weights` (A_LM, A_P, G_LM) and any `PldrllmConfig` field override."""
    kwargs = dict(
        vocab_size=99,
        hidden_size=32,
        num_attention_heads=2,
        head_dim=16,
        intermediate_size=37,
        num_hidden_layers=2,
        A_dff=8,
        num_reslayerA=2,
        num_denseA=2,
        max_position_embeddings=64,
        dag_weight_a_lm=dag_weights[0],
        dag_weight_a_p=dag_weights[1],
        dag_weight_g_lm=dag_weights[2],
    )
    kwargs.update(overrides)
    return PldrllmConfig(**kwargs)


def tiny_model(attn_implementation="eager", **overrides) -> PldrllmForCausalLM:
    config = tiny_config(**overrides)
    config._attn_implementation = attn_implementation
    return PldrllmForCausalLM(config).eval()


def make_invariant(model: PldrllmForCausalLM) -> PldrllmForCausalLM:
    """Force the metric learner to an input-independent output: a zero-gain final LayerNorm returns its bias."""
    with torch.no_grad():
        for layer in model.decoder.dec_layers:
            norm = layer.mha1.reslayerAs[-1].layernormA
            norm.weight.zero_()
            norm.bias.normal_()
    return model


def tiny_agf_config(**overrides) -> AgfConfig:
    """The tiny AGF-family translation model of the tests: 2+2 layers, 32 wide, 4 heads, no dropout, weights large
    enough (`init_std` 0.2) that attention and every position term visibly move the logits; `overrides` are
    `AgfConfig` fields."""
    kwargs = dict(
        vocab_size=99,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
        dropout=0.0,
        init_std=0.2,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    kwargs.update(overrides)
    return AgfConfig(**kwargs)


class Seq2SeqLogits(torch.nn.Module):
    """A translation model's forward as torch.export and ONNX trace it: tensors in, logits out, no cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False
        )
        return out.logits


def tiny_agf(**overrides) -> AgfForConditionalGeneration:
    """`tiny_agf_config(**overrides)` as a model in eval mode."""
    return AgfForConditionalGeneration(tiny_agf_config(**overrides)).eval()


def tiny_pldrllm_tokenizer():
    """Word-level tokenizer with the PLDR-LLM special ids ([PAD] 0, [UNK] 1, [BOS] 2, [END] 3) over 15 words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "the a cat dog sat on mat and ran far away over hill bird sang".split()
    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[END]": 3, **{w: i + 4 for i, w in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]", eos_token="[END]"
    )


TRANSLATION_WORDS = "the cat dog sat ran on a mat far away die katze hund sass lief auf einer matte weit weg".split()


def tiny_translation_tokenizer():
    """Word-level tokenizer over `TRANSLATION_WORDS`; <pad>=0, <s>=1, </s>=2, <unk>=3; decodes to space-separated
    words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["<pad>", "<s>", "</s>", "<unk>"] + [f"▁{w}" for w in TRANSLATION_WORDS]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    # "never": a word keeps its leading space when decoded alone, as the text-generation pipeline decodes the new
    # tokens apart from the prompt (like byte-level BPE; full decodes then start with a space)
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


# runners: one implementation of each property both families must have, called by both families' tests


def _auto_class(model):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM if model.config.is_encoder_decoder else AutoModelForCausalLM


def assert_generate_cache_equals_no_cache(model, inputs: dict, *, new_tokens: int = 5, atol=1e-4, **generate_kwargs):
    """`generate()` with and without the cache gives the same tokens and, step by step, the same logits (both runs
    seeded alike, so sampling is covered too). `inputs`: `input_ids` and `attention_mask`."""
    results = []
    for use_cache in (True, False):
        torch.manual_seed(0)
        results.append(
            model.generate(
                **inputs,
                use_cache=use_cache,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                return_dict_in_generate=True,
                output_logits=True,
                **generate_kwargs,
            )
        )
    cached, uncached = results
    assert torch.equal(cached.sequences, uncached.sequences), (cached.sequences, uncached.sequences)
    for step, (a, b) in enumerate(zip(cached.logits, uncached.logits)):
        assert_close(f"step {step} logits", b, a, atol=atol)


def assert_padded_generation_equals_rows_alone(model, inputs: dict, *, new_tokens: int = 5, **generate_kwargs):
    """Each row of a left-padded batch generates what the row generates alone (its pads stripped)."""
    batch = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **generate_kwargs)
    for row, mask in enumerate(inputs["attention_mask"]):
        pads = int((mask == 0).sum())
        alone = model.generate(
            inputs["input_ids"][row : row + 1, pads:],
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            **generate_kwargs,
        )
        # a decoder-only output repeats its (padded) prompt; an encoder–decoder output is the target side only
        start = 0 if model.config.is_encoder_decoder else pads
        assert batch[row, start:].tolist() == alone[0].tolist(), f"row {row}"


def assert_save_load_bit_identical(model, folder, forward_inputs: dict, **load_kwargs):
    """`save_pretrained` then the family's Auto class loads a model of the same class whose outputs are bit-identical
    on `forward_inputs`; returns the reloaded model."""
    model.save_pretrained(folder)
    loaded = _auto_class(model).from_pretrained(folder, **load_kwargs).eval()
    assert type(loaded) is type(model)
    with torch.no_grad():
        assert torch.equal(model(**forward_inputs).logits, loaded(**forward_inputs).logits)
    return loaded


def markdown_tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of `text` (rows of cells), each checked for well-formedness: a header, a `|---|` separator
    and every row with as many cells as the header. Raises AssertionError naming the first bad row."""
    tables, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            rows = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in block]
            assert len(rows) >= 2 and all(set(cell) <= set("-: ") and cell for cell in rows[1]), block[:2]
            for row, raw in zip(rows, block):
                assert len(row) == len(rows[0]), f"{len(row)} cells under {len(rows[0])} header cells: {raw}"
            tables.append([rows[0]] + rows[2:])
            block = []
    return tables


def complete_on_server(
    argv: list[str],
    port: int,
    payload: dict,
    *,
    env=None,
    startup_s: float = 180,
    ctrl_c_exit_s: float | None = None,
    also: dict | None = None,
) -> dict:
    """Starts an OpenAI-compatible server (`argv`, listening on 127.0.0.1:`port`), waits until `/health` answers,
    posts one `/v1/completions` request and returns its JSON answer; the server is stopped in every case. `also`:
    {route: payload} of further requests, whose (HTTP status, JSON body) are returned under `answer["also"]`. With
    `ctrl_c_exit_s`, the answers are followed by a Ctrl-C (SIGINT), after which the server must have exited within that
    many seconds."""
    import json
    import signal
    import subprocess
    import time
    import urllib.error
    import urllib.request

    server = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT
    )
    try:
        deadline = time.time() + startup_s
        while True:
            assert server.poll() is None, server.stderr.read()[-4000:]
            assert time.time() < deadline, f"the server did not come up within {startup_s:.0f} s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        answer["also"] = {}
        for route, body in (also or {}).items():
            extra = urllib.request.Request(
                f"http://127.0.0.1:{port}{route}",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(extra, timeout=120) as response:
                    answer["also"][route] = (response.status, json.loads(response.read()))
            except urllib.error.HTTPError as error:
                answer["also"][route] = (error.code, json.loads(error.read() or b"null"))
        if ctrl_c_exit_s is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=ctrl_c_exit_s)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the server was still running {ctrl_c_exit_s:.0f} s after Ctrl-C") from None
        return answer
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
