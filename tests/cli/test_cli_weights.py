"""A saved folder whose weights file lacks a tensor (or holds an extra one) is refused by every command that loads a
model, with one line naming the tensor and exit status 1: never a run on randomly re-initialised weights."""

import pytest
from safetensors.torch import load_file, save_file

from plldr_hf.cli import main
from plldr_hf.loading import WeightsMismatchError, load_model
from tests.hub_utils import tiny_agf as tiny_agf_for_tokenizer
from tests.utils import tiny_model, tiny_translation_tokenizer
from tests.utils import tiny_pldrllm_tokenizer as tiny_tokenizer


MISSING_PLDR = "decoder.dec_layers.0.mha1.wq.weight"
MISSING_AGF = "model.encoder.layers.0.fc1.weight"


def _damaged(folder, drop: str | None = None, extra: bool = False):
    weights = load_file(folder / "model.safetensors")
    if drop is not None:
        weights.pop(drop)
    if extra:
        weights["decoder.no_such_tensor"] = weights[next(iter(weights))].clone()
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def pldr_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pldr_damaged")
    tokenizer = tiny_tokenizer()
    tiny_model(vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return _damaged(folder, drop=MISSING_PLDR)


@pytest.fixture(scope="module")
def agf_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agf_damaged")
    tokenizer = tiny_translation_tokenizer()
    tiny_agf_for_tokenizer(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return _damaged(folder, drop=MISSING_AGF)


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "{dir}", "--block-size", "16"],
        ["diagnose", "{dir}", "--output-dir", "{tmp}/diag"],
        ["collapse", "{dir}", "{tmp}/collapsed", "--force"],
        ["push", "{dir}", "org/repo", "--dry-run", "{tmp}/dry"],
    ],
    ids=lambda c: c[0],
)
def test_pldrllm_commands_refuse_missing_weights(pldr_dir, tmp_path, capsys, command):
    argv = [part.format(dir=pldr_dir, tmp=tmp_path) for part in command]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and MISSING_PLDR in err and "missing" in err, err
    assert not (tmp_path / "collapsed").exists() and not (tmp_path / "dry").exists()


@pytest.mark.parametrize(
    "command",
    [["translate", "{dir}", "the cat sat"], ["evaluate", "{dir}", "--max-samples", "4"], ["plot-agf", "{dir}"]],
    ids=lambda c: c[0],
)
def test_agf_commands_refuse_missing_weights(agf_dir, capsys, command):
    assert main([part.format(dir=agf_dir) for part in command]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and MISSING_AGF in err, err


def test_unexpected_tensors_are_refused_too_and_the_api_can_allow_them(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    load_model(tmp_path)  # intact: loads
    _damaged(tmp_path, extra=True)
    with pytest.raises(WeightsMismatchError, match="unexpected: decoder.no_such_tensor"):
        load_model(tmp_path)
    assert load_model(tmp_path, allow_mismatched_weights=True) is not None


def test_non_finite_scores_exit_non_zero_and_say_so(tmp_path, capsys):
    # finite weights whose products overflow (an LM head of 3e38): the perplexity is NaN; the scores are still
    # printed and saved, and the command says why they are not usable and exits 1 instead of 0 (NaN weights
    # themselves are refused at load: tests/test_input_classes.py)
    import torch

    intact, broken = tmp_path / "intact", tmp_path / "overflowing-head"
    tokenizer = tiny_tokenizer()
    for folder in (intact, broken):
        tiny_model(vocab_size=len(tokenizer)).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    weights = load_file(broken / "model.safetensors")
    weights["final_layer.weight"] = torch.full_like(weights["final_layer.weight"], 3e38)
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    scores = tmp_path / "scores.json"
    status = main(["evaluate", str(broken), "--max-blocks", "2", "--block-size", "16", "--output-json", str(scores)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and scores.is_file()
    assert (
        err[-1].startswith("plldr-hf evaluate: error: scores that are not finite")
        and "validation cross_entropy=nan" in err[-1]
    )
    assert main(["evaluate", str(intact), "--max-blocks", "2", "--block-size", "16"]) == 0


@pytest.mark.parametrize(
    "family, field, value, command",
    [
        ("pldrllm", "num_hidden_layers", "two", ["evaluate", "{dir}", "--block-size", "16"]),
        ("pldrllm", "hidden_size", 48, ["diagnose", "{dir}", "--output-dir", "{tmp}/diag"]),
        ("agf", "dropout", 1.5, ["translate", "{dir}", "the cat sat"]),
        ("agf", "pcmv", "yes", ["evaluate", "{dir}", "--max-samples", "4"]),
    ],
    ids=lambda v: v if isinstance(v, str) and not v.startswith("{") else None,
)
def test_a_config_value_the_strict_config_refuses_is_one_line_naming_it(
    tmp_path, capsys, family, field, value, command
):
    """A saved config.json edited into a value the `@strict` config refuses (a field's type or range, or the check
    between fields): every command names the field in one line, exit status 2, before any work."""
    import json

    folder = tmp_path / "model"
    if family == "pldrllm":
        tokenizer = tiny_tokenizer()
        tiny_model(vocab_size=len(tokenizer)).save_pretrained(folder)
    else:
        tokenizer = tiny_translation_tokenizer()
        tiny_agf_for_tokenizer(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main([part.format(dir=folder, tmp=tmp_path) for part in command]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and "Traceback" not in err, err
    assert not (tmp_path / "diag").exists()


def test_a_model_override_the_strict_config_refuses_is_one_line(tmp_path, capsys):
    argv = ["train", "agf", "--tiny", "--set", "dropout=1.5", "--output-dir", str(tmp_path / "run")]
    assert main([*argv, "--report_to", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "dropout" in err[-1] and "1.5" in err[-1] and err[-1].startswith("plldr-hf train agf: error:"), err
    assert not (tmp_path / "run").exists()
