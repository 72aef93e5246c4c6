"""Classes of bad input, each checked where the class is decided (the probe, `tools/probe_bad_inputs.py`, runs every
command against them): configs that cannot be built or are of the wrong type, weights that load but cannot be
right, checkpoints that are not the run's, flags of the other family, text that is not UTF-8, a validation split too
small to evaluate, files the user's umask does not allow to read."""

import json
import math
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file

from plldr_hf import AgfConfig, AgfForConditionalGeneration, PldrllmConfig, PldrllmForCausalLM
from plldr_hf.cli import main
from plldr_hf.loading import DamagedWeightsError, load_model
from plldr_hf.models.pldrllm.diagnostics import diagnose
from tests.utils import (
    CONFIG_ERRORS,
    StrictDataclassError,
    tiny_agf_config,
    tiny_config,
    tiny_model,
    tiny_pldrllm_tokenizer,
)


# ---------------------------------------------------------------- sizes: estimated before building
@pytest.mark.parametrize(
    "overrides",
    [{}, {"num_reslayerA": 5, "num_denseA": 3, "A_dff": 20}, {"tie_word_embeddings": True}, {"num_hidden_layers": 4}],
)
def test_the_pldrllm_estimate_counts_the_parameters_it_builds(overrides):
    model = PldrllmForCausalLM(tiny_config(**overrides))
    parameters, modules = model.config.estimated_size()
    assert parameters == sum(p.numel() for p in model.parameters())
    assert len(list(model.modules())) <= modules <= 1.2 * len(list(model.modules()))


def test_the_pldrllm_estimate_of_the_110m_config_is_exact():
    config = PldrllmConfig()
    with torch.device("meta"):
        model = PldrllmForCausalLM(config)
    assert config.estimated_size()[0] == sum(p.numel() for p in model.parameters()) == 109_689_362


@pytest.mark.parametrize("overrides", [{}, {"tie_word_embeddings": False}, {"position_encoding": "t5"}])
def test_the_agf_estimate_is_within_a_fifth_of_what_it_builds(overrides):
    model = AgfForConditionalGeneration(tiny_agf_config(**overrides))
    parameters, modules = model.config.estimated_size()
    assert math.isclose(parameters, sum(p.numel() for p in model.parameters()), rel_tol=0.2)
    assert len(list(model.modules())) <= modules


@pytest.mark.parametrize(
    "build",
    [
        lambda: PldrllmForCausalLM(tiny_config(intermediate_size=10**10)),
        lambda: PldrllmForCausalLM(tiny_config(num_hidden_layers=200_000)),
        lambda: PldrllmForCausalLM(tiny_config(num_reslayerA=10**6)),
        lambda: AgfForConditionalGeneration(tiny_agf_config(d_model=10**6, encoder_ffn_dim=4, decoder_ffn_dim=4)),
    ],
)
def test_a_model_that_cannot_fit_is_refused_with_its_estimate_before_building(build):
    with pytest.raises(ValueError, match=r"about [\d,]+ parameters in [\d,]+ modules"):
        build()


# ---------------------------------------------------------------- config values of the wrong type
@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: PldrllmConfig(vocab_size="512"), "vocab_size"),
        (lambda: PldrllmConfig(dtype="bogus"), "dtype"),
        (lambda: AgfConfig(torch_dtype="int8"), "torch_dtype"),
        (lambda: AgfConfig(is_encoder_decoder=False), "is_encoder_decoder"),
        (lambda: PldrllmConfig(pad_token_id=[1]), "pad_token_id"),
        (lambda: PldrllmConfig(bos_token_id=[1]), "bos_token_id"),
        (lambda: PldrllmConfig(pad_token_id=True), "pad_token_id"),
        (lambda: AgfConfig(decoder_start_token_id=True), "decoder_start_token_id"),
    ],
)
def test_config_values_of_the_wrong_type_are_named(make, field):
    with pytest.raises(CONFIG_ERRORS, match=field):
        make()


def test_config_values_given_after_construction_are_checked_before_building_or_saving(tmp_path):
    """`from_pretrained(..., field=value)`, `update()` and assignment are checked as the field is set (`@strict`);
    the checks between fields, which one assignment cannot pass, run again before a layer is built and before
    `save_pretrained` writes."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    PldrllmForCausalLM(tiny_config()).save_pretrained(tmp_path / "pldr")
    AgfForConditionalGeneration(tiny_agf_config()).save_pretrained(tmp_path / "agf")
    with pytest.raises(StrictDataclassError, match=r"(?s)'num_hidden_layers' expected int, got str"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "pldr", num_hidden_layers="x")
    with pytest.raises(StrictDataclassError, match=r"(?s)'rope_theta'.*got nan"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "pldr", rope_theta=math.nan)
    with pytest.raises(StrictDataclassError, match=r"(?s)'dropout'.*smaller than 1.0, got 2.0"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "agf", dropout=2.0)
    config = tiny_agf_config()
    with pytest.raises(StrictDataclassError, match=r"(?s)'d_model'.*got -4"):
        config.update({"d_model": -4})
    config = tiny_config()
    with pytest.raises(StrictDataclassError, match=r"(?s)'hidden_size' expected int"):
        config.hidden_size = "x"
    config.hidden_size = 48  # a valid width, but no longer heads x head_dim
    with pytest.raises(StrictDataclassError, match=r"`hidden_size` \(48\) must equal `num_attention_heads`"):
        PldrllmForCausalLM(config)
    with pytest.raises(StrictDataclassError, match=r"`hidden_size` \(48\) must equal"):
        config.save_pretrained(tmp_path / "saved")
    assert not (tmp_path / "saved" / "config.json").exists()
    config = tiny_agf_config()
    config.pcmv, config.position_encoding = True, "rope"
    with pytest.raises(StrictDataclassError, match=r"`pcmv=True` .* needs `position_encoding='agf'`"):
        AgfForConditionalGeneration(config)


def test_generation_may_stop_at_a_list_of_pldrllm_eos_ids():
    assert PldrllmConfig(eos_token_id=[3, 4]).eos_token_id == [3, 4]


# ---------------------------------------------------------------- call arguments: shape, type and range
IDS = torch.tensor([[5, 6, 7, 8]])


def _pldr():
    torch.manual_seed(0)
    return PldrllmForCausalLM(tiny_config()).eval()


def _agf():
    torch.manual_seed(0)
    return AgfForConditionalGeneration(tiny_agf_config()).eval()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: _pldr()(IDS, position_ids=torch.tensor([[-3, -2, -1, 0]])), r"`position_ids` must be >= 0"),
        (lambda: _pldr()(IDS, position_ids=torch.tensor([[0, 1]])), r"`position_ids` must be integers of shape"),
        (lambda: _pldr()(inputs_embeds=torch.randn(1, 4, 7)), r"`inputs_embeds` must be floats of shape \(batch"),
        (lambda: _pldr()(IDS, labels=torch.tensor([[5, 6, 700, 8]])), r"`labels` holds token id 700, outside"),
        (lambda: _pldr()(IDS, labels=IDS.float()), r"`labels` must be integer token ids"),
        (lambda: _pldr()(IDS, shift_labels=torch.tensor([[5, 6, 7, -5]])), r"`shift_labels` holds token id -5"),
        (lambda: _pldr()(IDS, labels=IDS, dag_weights=(float("nan"), 0, 0)), r"`dag_weights` must be three finite"),
        (lambda: _pldr()(IDS, labels=IDS, dag_weights=(-1.0, 0, 0)), r"`dag_weights` must be three finite"),
        (lambda: _pldr()(IDS, past_key_values=((IDS, IDS),)), r"must be a transformers Cache object"),
        (lambda: _agf()(IDS, decoder_input_ids=IDS, decoder_position_ids=-IDS), r"`position_ids` must be >= 0"),
        (lambda: _agf()(IDS, labels=torch.tensor([[5, 6, 700, 8]])), r"`labels` holds token id 700, outside"),
        (lambda: _agf()(IDS, decoder_input_ids=IDS[:, :2], labels=IDS), r"one label per decoder position"),
        (lambda: _agf()(encoder_outputs=(torch.randn(1, 4, 7),), decoder_input_ids=IDS), r"encoder output"),
        (lambda: _agf()(inputs_embeds=torch.randn(1, 4, 7), decoder_input_ids=IDS), r"`inputs_embeds` must be"),
        (lambda: _agf()(IDS, decoder_input_ids=IDS, past_key_values=((IDS, IDS),)), r"transformers Cache object"),
    ],
)
def test_call_arguments_of_the_wrong_shape_type_or_range_are_named(call, message):
    """Each would otherwise fail deep inside (an index error in the loss, a LayerNorm or matmul shape error, a
    tuple without `.layers`) or silently (a negative position reads the RoPE table from its end; a NaN DAG weight
    makes the loss NaN)."""
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m.collapse(tolerance=math.inf), r"`tolerance` must be a finite number"),
        (lambda m: m.collapse(tolerance=-1), r"`tolerance` must be >= 0"),
        (lambda m: m.collapse(tolerance="x"), r"`tolerance` must be a number"),
        (lambda m: m.collapse(calibration=5), r"calibration must be texts"),
        (lambda m: m.collapse(calibration=torch.rand(3, 4)), r"calibration ids must be an integer tensor"),
        (lambda m: m.collapse(calibration=[[1.5, 2.0], [3, 4]]), r"calibration must be texts"),
        (lambda m: diagnose(m, rtol=math.nan), r"`rtol` must be a finite number"),
        (lambda m: diagnose(m, new_tokens="x"), r"`new_tokens` must be an integer"),
    ],
)
def test_collapse_and_diagnose_name_a_bad_number_or_calibration(call, message):
    """`tolerance=inf` used to collapse any model; a float calibration tensor was cast to ids silently."""
    model = _pldr()
    with pytest.raises(ValueError, match=message):
        call(model)
    assert not model.config.collapsed


def test_generation_past_the_rope_table_names_max_new_tokens():
    torch.manual_seed(0)
    model = PldrllmForCausalLM(tiny_config(reference_rope=True, max_position_embeddings=12)).eval()
    # the last new token is never fed back, so prompt + new - 1 positions are used
    room = model.config.max_position_embeddings - IDS.shape[1] + 1
    model.generate(IDS, max_new_tokens=room, min_new_tokens=room, do_sample=False)  # fits exactly
    with pytest.raises(ValueError, match=r"lower max_new_tokens \(or max_length\)"):
        model.generate(IDS, max_new_tokens=room + 1, min_new_tokens=room + 1, do_sample=False)


def test_ignored_labels_and_explicit_positions_still_work():
    pldr, agf = _pldr(), _agf()
    ignored = torch.tensor([[-100, 6, 7, 8]])
    assert torch.isfinite(pldr(IDS, labels=ignored).loss) and torch.isfinite(agf(IDS, labels=ignored).loss)
    positions = torch.arange(4)[None]
    assert torch.equal(pldr(IDS, position_ids=positions).logits, pldr(IDS).logits)


def test_tie_word_embeddings_ties_the_pldrllm_head_and_survives_a_round_trip(tmp_path):
    model = tiny_model(tie_word_embeddings=True)
    assert model.final_layer.weight is model.decoder.embedding.weight
    model.save_pretrained(tmp_path)
    loaded = PldrllmForCausalLM.from_pretrained(tmp_path, attn_implementation="eager")
    ids = torch.tensor([[4, 5, 6]])
    assert loaded.final_layer.weight is loaded.decoder.embedding.weight
    assert torch.equal(model(ids).logits, loaded(ids).logits)


# ---------------------------------------------------------------- weights that load but cannot be right
@pytest.fixture
def pldr_dir(tmp_path):
    tokenizer = tiny_pldrllm_tokenizer()
    tiny_model(vocab_size=len(tokenizer)).save_pretrained(tmp_path / "pldr")
    tokenizer.save_pretrained(tmp_path / "pldr")
    return tmp_path / "pldr"


def _rewrite(folder, change):
    weights = load_file(folder / "model.safetensors")
    save_file(change(weights), folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda w: {k: (v * 10).to(torch.int8) for k, v in w.items()}, "stored as integers"),
        (lambda w: {**w, "final_layer.weight": w["final_layer.weight"].to(torch.int8)}, "final_layer.weight"),
        (lambda w: {**w, "final_layer.bias": w["final_layer.bias"].clone().fill_(float("nan"))}, "NaN or infinite"),
        (lambda w: {k: v.clone().fill_(float("inf")) for k, v in w.items()}, "NaN or infinite"),
    ],
)
def test_weights_that_cannot_be_right_are_refused(pldr_dir, change, message, capsys):
    _rewrite(pldr_dir, change)
    with pytest.raises(DamagedWeightsError, match=message):
        load_model(pldr_dir)
    assert main(["evaluate", str(pldr_dir), "--max-blocks", "2"]) == 1
    assert message.split()[0] in capsys.readouterr().err


def test_one_tensor_of_another_float_dtype_is_cast_with_a_warning(pldr_dir):
    _rewrite(pldr_dir, lambda w: {**w, "final_layer.weight": w["final_layer.weight"].half()})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(pldr_dir)
    assert model.final_layer.weight.dtype == torch.float32
    assert any("final_layer.weight (F16)" in str(w.message) for w in caught)


# ---------------------------------------------------------------- flags and tokenizers of the other family
def test_a_flag_of_the_other_family_is_refused(pldr_dir, capsys):
    assert main(["evaluate", str(pldr_dir), "--num-beams", "4"]) == 2
    assert "--num-beams applies to agf models" in capsys.readouterr().err
    # a flag given with its default value is still the other family's
    assert main(["evaluate", str(pldr_dir), "--source-lang", "en"]) == 2


def test_a_tokenizer_saved_beside_another_family_is_refused(pldr_dir, tmp_path, capsys):
    from tests.utils import tiny_translation_tokenizer

    other = tmp_path / "agf"
    tokenizer = tiny_translation_tokenizer()
    AgfForConditionalGeneration(tiny_agf_config(vocab_size=len(tokenizer))).save_pretrained(other)
    tokenizer.save_pretrained(other)
    texts = tmp_path / "texts.txt"
    texts.write_text("to be or not to be\n")
    argv = ["diagnose", str(pldr_dir), "--texts", str(texts), "--tokenizer", str(other)]
    assert main([*argv, "--output-dir", str(tmp_path / "d")]) == 2
    assert "belongs to a 'agf' model" in capsys.readouterr().err


def test_serve_refuses_a_learned_g_with_continuous_batching_when_it_starts(pldr_dir, capsys):
    assert main(["serve", str(pldr_dir), "--continuous-batching"]) == 2
    assert "Collapse the model first" in capsys.readouterr().err


# ---------------------------------------------------------------- text and data
def test_the_default_evaluation_data_is_the_held_out_split_of_the_training_corpus(tmp_path, capsys):
    import gzip

    from plldr_hf.training.corpus import embedded_data_path

    corpus = tmp_path / "mine.txt"
    corpus.write_text(gzip.open(embedded_data_path("en_shakespeare", "validation.txt.gz"), "rt").read()[:60000])
    out = tmp_path / "run"
    argv = ["train", "pldrllm", "--tiny", "--dataset", str(corpus), "--max-steps", "2", "--output-dir", str(out)]
    assert main([*argv, "--report-to", "none"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--max-blocks", "2", "--format", "json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["validation"]["data"] == f"validation split of {corpus} (not trained on)"
    assert main(["evaluate", str(out), "--max-blocks", "2", "--dataset", str(corpus), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["validation"] == scores["validation"]


def test_a_corpus_too_small_to_evaluate_is_refused_before_the_first_step(tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("\n\n".join(f"paragraph {i} of a short text" for i in range(60)))
    out = tmp_path / "run"
    argv = ["train", "pldrllm", "--tiny", "--dataset", str(small), "--output-dir", str(out), "--report-to", "none"]
    assert main(argv) == 2
    assert "fewer than one evaluation batch" in capsys.readouterr().err
    assert not out.exists()


def test_a_latin1_texts_file_is_named(pldr_dir, tmp_path, capsys):
    texts = tmp_path / "latin1.txt"
    texts.write_bytes(b"caf\xe9 au lait\n")
    assert main(["diagnose", str(pldr_dir), "--texts", str(texts), "--output-dir", str(tmp_path / "d")]) == 2
    assert "latin1.txt is not UTF-8" in capsys.readouterr().err


# ---------------------------------------------------------------- checkpoints that are not the run's
def test_a_checkpoint_with_an_impossible_step_or_foreign_weights_is_refused(tmp_path, pldr_dir):
    from plldr_hf.training.start import check_checkpoint

    out = tmp_path / "run"
    argv = ["train", "agf", "--tiny", "--max-steps", "2", "--save-steps", "2", "--output-dir", str(out)]
    assert main([*argv, "--report-to", "none"]) == 0
    checkpoint = out / "checkpoint-2"
    check_checkpoint(checkpoint, "agf")  # the run's own checkpoint passes
    with pytest.raises(ValueError, match="holds a 'agf' model"):
        check_checkpoint(checkpoint, "pldrllm")
    weights = (checkpoint / "model.safetensors").read_bytes()
    (checkpoint / "model.safetensors").write_bytes((pldr_dir / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="its weights are not this model's"):
        check_checkpoint(checkpoint, "agf")
    (checkpoint / "model.safetensors").write_bytes(weights)
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    (checkpoint / "trainer_state.json").write_text(json.dumps({**state, "global_step": -5}))
    with pytest.raises(ValueError, match="global_step"):
        check_checkpoint(checkpoint, "agf")


# ---------------------------------------------------------------- what the user's umask allows
def test_a_written_model_folder_is_readable_as_the_umask_allows(pldr_dir, tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        assert main(["collapse", str(pldr_dir), str(tmp_path / "c"), "--force"]) == 0
    finally:
        os.umask(umask)
    assert (tmp_path / "c" / "model.safetensors").stat().st_mode & 0o777 == 0o644
