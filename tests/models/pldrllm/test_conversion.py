"""Legacy `.pth` conversion and predefined-G loading, against files made by the reference code.

Fixtures: `tests/fixtures/pldrllm_legacy_pth/` (a `.pth` saved by the reference PyTorch code with its logits) and
`tests/fixtures/pldrllm_released/` (the real predefined-G pickle of the trained v51-110M-1).
"""

import os
import pickle

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import plldr_hf
from plldr_hf.cli import main as cli_main
from tests.utils import FIXTURES, assert_close, tiny_config


LEGACY = FIXTURES / "pldrllm_legacy_pth"
G_FILE = FIXTURES / "pldrllm_released" / "predefined_G_LM_cache_list_PLDRv51_110M_1_5layer_14head_64x64_paper.pkl"


def test_reference_pth_converts_and_reproduces_its_logits(tmp_path, capsys):
    out = tmp_path / "converted"
    assert cli_main(["convert", str(LEGACY / "tiny_v510.pth"), str(out), "--max-position-embeddings", "32"]) == 0
    assert "3 layers, width 32, 2 heads × 16, vocab 64, max_position_embeddings 32" in capsys.readouterr().out
    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, attn_implementation="eager")
    assert not any(info.values())
    cfg = model.config
    hyper = {
        "num_hidden_layers": 3,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 85,
        "vocab_size": 64,
        "A_dff": 12,
        "num_reslayerA": 2,
        "num_denseA": 2,
        "max_position_embeddings": 32,
    }
    assert {k: getattr(cfg, k) for k in hyper} == hyper  # = hyperparameters.json, read off the shapes
    assert cfg.reference_rope is True
    assert {"config.json", "model.safetensors", "generation_config.json"} <= set(os.listdir(out))
    expected = load_file(LEGACY / "expected.safetensors")
    with torch.no_grad():
        logits = model(expected["input_ids"]).logits
    assert_close("converted .pth logits", expected["logits"], logits, atol=1e-4, rtol=1e-4)
    # the NeoX convention is not what the reference code trained with
    neox = tmp_path / "neox"
    assert (
        cli_main(
            [
                "convert",
                str(LEGACY / "tiny_v510.pth"),
                str(neox),
                "--max-position-embeddings",
                "32",
                "--no-reference-rope",
            ]
        )
        == 0
    )
    with torch.no_grad():
        other = AutoModelForCausalLM.from_pretrained(neox)(expected["input_ids"]).logits
    assert (other - expected["logits"]).abs().max() > 1e-2


def _save_pth(path, state):
    torch.save({"model_state_dict": state, "optimizer_state_dict": None, "loss": 1.0, "accuracy": 0.5}, path)


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing_file", "model.pth not found"),
        ("truncated", "not a readable PyTorch checkpoint"),
        ("missing_key", "missing ['decoder.dec_layers.1.ffn.gluw3.bias']"),
        ("not_pldr", "not a PLDR-LLM state dict"),
        ("pickled_object", "not loaded (weights_only=True)"),
    ],
)
def test_bad_checkpoints_get_one_clear_line_and_write_nothing(tmp_path, capsys, case, message):
    pth = tmp_path / "model.pth"
    state = torch.load(LEGACY / "tiny_v510.pth", weights_only=True)["model_state_dict"]
    if case == "truncated":
        pth.write_bytes((LEGACY / "tiny_v510.pth").read_bytes()[:5000])
    elif case == "missing_key":
        del state["decoder.dec_layers.1.ffn.gluw3.bias"]
        _save_pth(pth, state)
    elif case == "not_pldr":
        _save_pth(pth, {"weight": torch.zeros(2)})
    elif case == "pickled_object":
        torch.save({"model_state_dict": state, "scheduler": _Scheduler()}, pth)
    out = tmp_path / "out"
    assert cli_main(["convert", str(pth), str(out), "--max-position-embeddings", "32"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["model.pth"] if case != "missing_file" else [])


class _Scheduler:
    """An arbitrary object, as a training script might pickle next to the weights."""


def test_tokenizer_is_written_and_checked(tmp_path, capsys):
    model = plldr_hf.PldrllmForCausalLM(tiny_config(vocab_size=32000, max_position_embeddings=64))
    pth = tmp_path / "big_vocab.pth"
    _save_pth(pth, model.state_dict())
    out = tmp_path / "out"
    args = ["convert", str(pth), str(out), "--max-position-embeddings", "64"]
    assert cli_main([*args, "--tokenizer", str(FIXTURES / "pldrllm_released" / "tokenizer.model")]) == 0
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert isinstance(tokenizer, plldr_hf.PldrllmTokenizer) and (out / "tokenizer.model").is_file()
    # a 32,000-piece tokenizer cannot belong to the fixture's 64-token model
    wrong = tmp_path / "wrong"
    legacy = ["convert", str(LEGACY / "tiny_v510.pth"), str(wrong), "--max-position-embeddings", "32"]
    assert cli_main([*legacy, "--tokenizer", str(FIXTURES / "pldrllm_released" / "tokenizer.model")]) == 2
    assert "32000 pieces" in capsys.readouterr().err and not wrong.exists()
    # an existing non-empty folder is never overwritten
    assert cli_main(args) == 2 and "not empty" in capsys.readouterr().err


def test_real_predefined_g_file_loads_on_the_cpu():
    g = plldr_hf.load_predefined_g(G_FILE)
    assert g.shape == (5, 14, 64, 64) and g.dtype == torch.float32 and g.device.type == "cpu"
    assert torch.isfinite(g).all() and g.abs().mean() > 0.1
    # heads differ and layers differ: a real trained G, not a placeholder
    assert (g[0, 0] - g[0, 1]).abs().max() > 1e-3 and (g[0] - g[1]).abs().max() > 1e-3


class _RunsCommand:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.parametrize("payload", ["os_system", "eval"])
def test_a_pickle_naming_other_globals_is_refused_before_it_runs(tmp_path, payload):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pkl"
    if payload == "os_system":
        obj = [torch.zeros(1, 2, 4, 4), _RunsCommand(f"touch {marker}")]
    else:

        class _Eval:
            def __reduce__(self):
                return (eval, (f"open({str(marker)!r}, 'w')",))

        obj = [_Eval()]
    evil.write_bytes(pickle.dumps(obj, protocol=5))
    with pytest.raises(pickle.UnpicklingError, match="system|eval"):
        plldr_hf.load_predefined_g(evil)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_a_tensor_list_of_any_pickle_protocol_loads(tmp_path, protocol):
    layers = [torch.randn(1, 2, 4, 4) for _ in range(3)]
    path = tmp_path / "g.pkl"
    # protocol 2 spells the stored bytes as _codecs.encode(text, "latin1"): read safely, never run as a call
    path.write_bytes(pickle.dumps(layers, protocol=protocol))
    assert torch.equal(plldr_hf.load_predefined_g(path), torch.stack([g[0] for g in layers]))


class _ZeroStride:
    """A view of one stored float repeated over a (1, 16, 4000, 4000) shape: 1 GB once copied, from a tiny file."""

    def __reduce__(self):
        import collections

        storage = torch.zeros(1).untyped_storage()
        typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=torch.float32, _internal=True)
        return (
            torch._utils._rebuild_tensor_v2,
            (typed, 0, (1, 16, 4000, 4000), (0, 0, 0, 0), False, collections.OrderedDict()),
        )


@pytest.mark.parametrize("codec", [False, True])
def test_a_small_pickle_cannot_ask_for_a_large_allocation(tmp_path, codec):
    path = tmp_path / "bomb.pkl"
    if codec:  # a _codecs.encode call that is not protocol 2's latin1 bytes
        import _codecs

        class _Codec:
            def __reduce__(self):
                return (_codecs.encode, ("x" * 10, "rot13"))

        path.write_bytes(pickle.dumps([_Codec()], protocol=2))
        match = "latin1"
    else:
        path.write_bytes(pickle.dumps([_ZeroStride()], protocol=4))
        match = "reaches past or repeats"
    assert path.stat().st_size < 2000
    with pytest.raises(pickle.UnpicklingError, match=match):
        plldr_hf.load_predefined_g(path)


def test_predefined_g_feeds_the_fixed_g_model(tmp_path):
    # a predefined-G file in the reference format (a plain pickle of per-layer (1, H, d, d) tensors)
    identity = [torch.eye(16).expand(1, 2, 16, 16).clone() for _ in range(3)]
    g_file = tmp_path / "predefined_G_identity.pkl"
    g_file.write_bytes(pickle.dumps(identity, protocol=5))
    out = tmp_path / "fixed"
    assert (
        cli_main(
            [
                "convert",
                str(LEGACY / "tiny_v510.pth"),
                str(out),
                "--max-position-embeddings",
                "32",
                "--predefined-g",
                str(g_file),
            ]
        )
        == 0
    )
    fixed, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not any(info.values()) and fixed.config.custom_G_type == "external"
    assert torch.equal(fixed.decoder.past_G_values[:, 2, 0], torch.stack(identity)[:, 0])
    # G = I: the same weights in the identity-G model (plain SDPA attention) give the same logits
    state = load_file(out / "model.safetensors")
    reference = plldr_hf.PldrllmForCausalLM(
        fixed.config.__class__(**{**fixed.config.to_dict(), "custom_G_type": "identity"})
    )
    reference.load_state_dict(state, strict=True)
    ids = load_file(LEGACY / "expected.safetensors")["input_ids"]
    with torch.no_grad():
        assert_close("external G = I vs identity model", reference(ids).logits, fixed(ids).logits)
    # G of the wrong shape is refused
    wrong = tmp_path / "wrong"
    assert (
        cli_main(
            [
                "convert",
                str(LEGACY / "tiny_v510.pth"),
                str(wrong),
                "--max-position-embeddings",
                "32",
                "--predefined-g",
                str(G_FILE),
            ]
        )
        == 2
    )
    assert not wrong.exists()


def test_the_documented_conversion_journey_ends_in_text(tmp_path, capsys):
    """README, Released checkpoints: convert the reference `.pth` with a tokenizer of its vocabulary, then generate."""
    from transformers import pipeline

    out = tmp_path / "converted"
    args = ["convert", str(LEGACY / "tiny_v510.pth"), str(out), "--tokenizer", str(LEGACY / "tokenizer.model")]
    # the context length is not in the .pth: required, never guessed
    with pytest.raises(SystemExit):
        cli_main(args)
    assert "--max-position-embeddings" in capsys.readouterr().err
    assert cli_main([*args, "--max-position-embeddings", "32"]) == 0
    generator = pipeline("text-generation", model=str(out))
    text = generator("ROMEO:", max_new_tokens=12, do_sample=False)[0]["generated_text"]
    assert text.startswith("ROMEO:") and len(text) > len("ROMEO:")

    # the released 32,000-piece tokenizer belongs to the 110M models: refused with the reason, nothing written
    released = FIXTURES / "pldrllm_released" / "tokenizer.model"
    wrong = tmp_path / "wrong"
    assert cli_main(["convert", str(LEGACY / "tiny_v510.pth"), str(wrong), "--max-position-embeddings", "32",
                     "--tokenizer", str(released)]) == 2  # fmt: skip
    assert "32,000 pieces" in capsys.readouterr().err and not wrong.exists()
