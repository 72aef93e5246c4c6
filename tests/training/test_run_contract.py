"""One contract for a training run: `train(options) -> RunReport` for both families."""

import dataclasses
import json
import re

import pytest

from plldr_hf.models import FAMILIES
from plldr_hf.training import RunReport, TrainOptions, TranslationOptions, train


def test_the_options_are_transformers_training_arguments():
    """Each family's options are a `TrainingArguments` subclass (AGF: `Seq2SeqTrainingArguments`): the Trainer gets
    them as they are, and a setting shared by the families has one name and type (transformers' where it has one)."""
    import types
    import typing

    from transformers import Seq2SeqTrainingArguments, TrainingArguments

    assert issubclass(TrainOptions, TrainingArguments) and issubclass(TranslationOptions, Seq2SeqTrainingArguments)

    def value_type(hint):  # the type without `| None` (a family derives the value when it is not given)
        arms = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        return {arm for arm in arms if arm is not type(None)}

    shared, other = typing.get_type_hints(TrainOptions), typing.get_type_hints(TranslationOptions)
    ours = {f.name for f in dataclasses.fields(TrainOptions)} - {f.name for f in dataclasses.fields(TrainingArguments)}
    assert len(ours & set(other)) >= 6  # the model and data settings both families have
    for name in (
        *(ours & set(other)),
        "per_device_train_batch_size",
        "resume_from_checkpoint",
        "report_to",
        "seed",
        "disable_tqdm",
        "bf16",
    ):
        assert value_type(shared[name]) == value_type(other[name]), name
    assert TrainOptions().resume_from_checkpoint == TranslationOptions().resume_from_checkpoint is None
    # the recipe's values are the arguments' own: no second mapping between options and arguments
    options = TrainOptions.from_name("tiny", output_dir="unused")
    assert (options.adam_beta2, options.weight_decay, options.lr_scheduler_type.value) == (
        0.95,
        0.1,
        "cosine_with_min_lr",
    )
    assert (options.max_grad_norm, options.per_device_eval_batch_size, options.data_seed) == (0.0, 8, 0)
    translation = TranslationOptions.from_name("tiny")
    assert translation.output_dir == "runs/agf-agf" and translation.predict_with_generate
    assert (translation.adam_beta2, translation.adam_epsilon, translation.lr_scheduler_type.value) == (
        0.98, 1e-9, "inverse_sqrt"
    )  # fmt: skip
    with pytest.raises(ValueError, match="--wmt17-dir: .* is not a folder"):
        TranslationOptions(dataset=["wmt17"], wmt17_dir="/no/such/folder")


@pytest.mark.parametrize("old, new", [("batch_size", "per_device_train_batch_size"), ("no_progress", "disable_tqdm"),
                                      ("resume", "resume_from_checkpoint"), ("epochs", "num_train_epochs")])  # fmt: skip
def test_a_renamed_option_names_its_new_name(old, new):
    options = TranslationOptions if old == "epochs" else TrainOptions
    with pytest.raises(TypeError, match=f"{options.__name__}\\({old}=...\\): renamed; give {new}"):
        options(**{old: 1})
    with pytest.raises(ValueError, match=f"has no field {old}; renamed: give {new}"):
        options.from_name("tiny", **{old: 1})


def test_one_train_serves_the_pldrllm_family_and_reports_in_its_fields(tmp_path):
    options = TrainOptions.from_name(
        "tiny",
        output_dir=str(tmp_path),
        max_steps=2,
        eval_steps=0,
        logging_steps=1,
        max_train_documents=300,
        vocab_size=4000,  # more than 300 documents offer: the tokenizer warns, and the report keeps the warning
        report_to=["none"],
        disable_tqdm=True,
    )
    report = train(options)
    assert isinstance(report, RunReport) and report.family == "pldrllm" and report.main_process
    assert report.global_step == report.max_steps == 2 and report.model_class == "PldrllmForCausalLM"
    assert report.vocab_size == len(report.tokenizer) < 4000
    assert any("fewer than the 4000 asked for" in warning for warning in report.warnings), report.warnings
    validation = report.scores["validation"]
    assert validation["perplexity"] > 1 and validation["blocks"] == report.eval_examples > 0
    assert set(report.diagnostics) == {
        "order_parameter_before",
        "order_parameter_after",
        "order_parameter_after_real_text",
    }
    # the order parameter at each evaluation, beside the validation loss (here the final one, at step 2)
    logged = [entry for entry in report.log_history if "order_parameter_G_LM" in entry]
    after = report.diagnostics["order_parameter_after"]["across_inputs_max_over_layers"]["G_LM"]
    assert [entry["step"] for entry in logged] == [2] and logged[0]["order_parameter_G_LM"] == pytest.approx(after)
    assert [entry["num_input_tokens_seen"] for entry in report.log_history if "loss" in entry][-1] == 2 * 8 * 64
    saved = json.loads(report.path.read_text())
    assert saved["scores"]["validation"] == validation
    assert RunReport.load(tmp_path).to_dict() == json.loads(json.dumps(report.to_dict(), default=str))
    assert saved["options"]["max_steps"] == 2 and "model" not in saved and "log_history" not in saved


def test_train_dispatches_on_the_options_class():
    # one dispatch, written out in `run.pipeline_of` (which `train` and the command line call): the options' class
    # picks the pipeline, and the families name none
    from plldr_hf.training.causal_lm import train_causal_lm
    from plldr_hf.training.run import pipeline_of
    from plldr_hf.training.seq2seq import train_translation

    assert pipeline_of(TrainOptions()) is train_causal_lm
    assert pipeline_of(TranslationOptions()) is train_translation
    with pytest.raises(TypeError, match=r"train\(\) takes TrainOptions"):
        pipeline_of({"max_steps": 3})
    assert {TrainOptions.FAMILY, TranslationOptions.FAMILY} == set(FAMILIES)


def test_the_110m_size_is_the_papers_run_and_its_global_batch_holds_on_any_process_count(monkeypatch):
    options = TrainOptions(size="110m")
    # batches of 32 sequences of 1,024 tokens, about 8B tokens (arXiv 2410.16703, abstract)
    assert (options.block_size, options.global_batch_size, options.max_steps) == (1024, 32, 244_141)
    assert abs(options.global_batch_size * options.block_size * options.max_steps - 8e9) < 32 * 1024
    assert options.gradient_accumulation_steps == 2
    assert [options._accumulation(processes) for processes in (1, 2)] == [2, 1]
    with pytest.raises(ValueError, match="not a multiple of --batch-size 16 x 4 process"):
        options._accumulation(4)
    # without a global batch the accumulation is the option's, and a size without steps runs 100
    assert TrainOptions(size="mini", gradient_accumulation_steps=3).gradient_accumulation_steps == 3
    assert TrainOptions(size="mini").max_steps == 100


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist"),
        ("", "is not a readable training report"),
        ('{"family": "pldrllm", "output_', "is not a readable training report"),
        ("[" * 100_000, "is not a readable training report"),
        ('{"family": "pldrllm"}', "is not a training report (missing"),
        ("[1, 2]", "is not a training report"),
    ],
)
def test_a_report_that_cannot_be_read_is_named(tmp_path, content, message):
    if content is not None:
        (tmp_path / "train_report.json").write_text(content)
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        RunReport.load(tmp_path)
    assert str(tmp_path / "train_report.json") in str(refused.value)
