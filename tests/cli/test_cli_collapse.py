"""`plldr-hf collapse` and `plldr-hf diagnose` on tiny saved models (run in-process through `plldr_hf.cli.main`)."""

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from plldr_hf.cli import build_parser, main
from tests.utils import make_invariant, tiny_model
from tests.utils import tiny_pldrllm_tokenizer as tiny_tokenizer


IDS = torch.tensor([[5, 9, 14, 7, 30, 41, 8]])


def save_model(path, invariant: bool):
    torch.manual_seed(4)
    model = tiny_model("sdpa")
    if invariant:
        make_invariant(model)
    model.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return model


@pytest.fixture(scope="module")
def invariant_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("invariant")
    save_model(path, invariant=True)
    return path


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()


def test_subcommands_are_registered():
    help_text = build_parser().format_help()
    assert "collapse" in help_text and "diagnose" in help_text


def test_collapse_saves_a_collapsed_model(invariant_dir, tmp_path, capsys):
    out = tmp_path / "collapsed"
    assert main(["collapse", str(invariant_dir), str(out)]) == 0
    assert "invariant: True" in capsys.readouterr().out
    original, collapsed = load(invariant_dir), load(out)
    assert collapsed.config.collapsed and not original.config.collapsed
    assert (collapsed(IDS).logits - original(IDS).logits).abs().max() <= 1e-5
    report = json.loads((out / "collapse_report.json").read_text())
    assert report["invariant"] and report["order_parameter"]["G_LM"] == 0
    assert (out / "tokenizer.json").is_file()


def test_collapse_drop_metric_learner_writes_the_fixed_g_format(invariant_dir, tmp_path, capsys):
    out = tmp_path / "fixed"
    assert (
        main(["collapse", str(invariant_dir), str(out), "--drop-metric-learner", "--texts", str(texts_file(tmp_path))])
        == 0
    )
    assert "fixed-G" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert config["custom_G_type"] == "external" and config["model_type"] == "pldrllm"
    with safe_open(out / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert {"decoder.past_G_values", "decoder.past_G_values_status"} <= keys
    assert not any("reslayerAs" in k or "plgatt_layer" in k for k in keys)
    assert (load(out)(IDS).logits - load(invariant_dir)(IDS).logits).abs().max() <= 1e-5


def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("the cat sat on the mat\n\na dog ran far away over the hill\nthe bird sang\n")
    return path


def test_collapse_refuses_a_random_model_unless_forced(tmp_path, capsys):
    source = tmp_path / "random"
    save_model(source, invariant=False)
    out = tmp_path / "out"
    assert main(["collapse", str(source), str(out), "--tolerance", "1e-4"]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "G_LM" in err and "Tolerance on G_LM: 0.0001" in err
    assert not out.exists()
    assert main(["collapse", str(source), str(out), "--force"]) == 0
    assert "(forced)" in capsys.readouterr().out
    assert load(out).config.collapsed


def test_diagnose_prints_the_table_and_writes_json_and_plots(invariant_dir, tmp_path, capsys):
    out = tmp_path / "diag"
    assert main(["diagnose", str(invariant_dir), "--output-dir", str(out), "--new-tokens", "3"]) == 0
    printed = capsys.readouterr().out
    assert "SOC" in printed and "σ₂/σ₁" in printed and "| 1 |" in printed
    numbers = json.loads((out / "diagnostics.json").read_text())
    assert numbers["order_parameter"]["G_LM"] == 0 and all(all(row) for row in numbers["rows_identical"])
    for name in ("order_parameter.png", "singular_values_A.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_diagnose_with_texts(invariant_dir, tmp_path, capsys):
    out = tmp_path / "diag"
    assert main(["diagnose", str(invariant_dir), "--texts", str(texts_file(tmp_path)), "--output-dir", str(out)]) == 0
    numbers = json.loads((out / "diagnostics.json").read_text())
    assert numbers["num_inputs"] == 3 and numbers["input_lengths"] == [6, 8, 3]


def test_bad_inputs_give_clear_errors(tmp_path, capsys):
    missing = tmp_path / "missing"
    assert main(["diagnose", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["collapse", str(missing), str(tmp_path / "out")]) == 2
    assert "does not exist" in capsys.readouterr().err
    other = tmp_path / "llama"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert main(["diagnose", str(other)]) == 2
    assert "'llama'" in capsys.readouterr().err
    no_tokenizer = tmp_path / "no_tokenizer"
    tiny_model().save_pretrained(no_tokenizer)
    assert main(["diagnose", str(no_tokenizer), "--texts", str(texts_file(tmp_path))]) == 2
    assert "tokenizer" in capsys.readouterr().err
    assert main(["diagnose", str(no_tokenizer), "--texts", str(tmp_path / "nope.txt")]) == 2
    assert "texts file not found" in capsys.readouterr().err
