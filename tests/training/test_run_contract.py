"""One contract for a training run: `train(options) -> RunReport` for both families, options resolved once."""

import dataclasses
import json
import re

import pytest

from plldr_hf.models import FAMILIES
from plldr_hf.training import RunReport, TrainOptions, TranslationOptions, train


def test_both_option_classes_share_the_names_and_types_of_shared_settings():
    # the same value type; `| None` where one family derives the value when it is not given (PLDR-LLM: from the
    # size; AGF: the output folder from the position encoding, the step count from the epochs)
    def value_type(spec):
        return spec.type.removesuffix(" | None")

    shared = {f.name: value_type(f) for f in dataclasses.fields(TrainOptions)}
    other = {f.name: value_type(f) for f in dataclasses.fields(TranslationOptions)}
    assert len(set(shared) & set(other)) >= 18
    for name in set(shared) & set(other):
        assert shared[name] == other[name], name
    for name in ("gradient_accumulation_steps", "resume", "report_to", "seed", "output_dir", "no_progress", "bf16"):
        assert name in shared and name in other, name
    assert TrainOptions().resume == TranslationOptions().resume is None


def test_options_are_resolved_once():
    options = TrainOptions.from_name("tiny", output_dir="unused")
    resolved = options.resolved()
    assert not options.is_resolved and resolved.is_resolved and resolved is not options
    assert resolved.resolved() is resolved  # a second resolution is no work and no copy
    assert dataclasses.replace(resolved, max_steps=3).is_resolved is False  # a changed copy is checked again
    translation = TranslationOptions.from_name("tiny").resolved()
    assert translation.output_dir == "runs/agf-agf" and translation.resolved() is translation
    with pytest.raises(ValueError, match="--wmt17-dir: .* is not a folder"):
        TranslationOptions(dataset=["wmt17"], wmt17_dir="/no/such/folder").resolved()


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
        no_progress=True,
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


def test_the_110m_size_is_the_papers_run_and_its_global_batch_holds_on_any_process_count():
    from plldr_hf.training.recipes import gradient_accumulation

    options = TrainOptions(size="110m").resolved()
    # batches of 32 sequences of 1,024 tokens, about 8B tokens (arXiv 2410.16703, abstract)
    assert (options.block_size, options.global_batch_size, options.max_steps) == (1024, 32, 244_141)
    assert abs(options.global_batch_size * options.block_size * options.max_steps - 8e9) < 32 * 1024
    assert [gradient_accumulation(options, processes) for processes in (1, 2)] == [2, 1]
    with pytest.raises(ValueError, match="not a multiple of --batch-size 16 x 4 process"):
        gradient_accumulation(options, 4)
    # without a global batch the accumulation is the option's, and a size without steps runs 100
    assert gradient_accumulation(TrainOptions(size="mini", gradient_accumulation_steps=3).resolved(), 2) == 3
    assert TrainOptions(size="mini").resolved().max_steps == 100


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
