"""Every field of transformers' `TrainingArguments` (`train pldrllm`) and `Seq2SeqTrainingArguments` (`train agf`)
is a command-line flag under its own name: the options are subclasses of those classes."""

import argparse
import dataclasses
import enum
import typing

import pytest
import transformers


FAMILIES = {"pldrllm": transformers.TrainingArguments, "agf": transformers.Seq2SeqTrainingArguments}


def _samples(arguments) -> dict[str, list[str]]:
    """A value `HfArgumentParser` reads for each field (parsing only: the options and transformers check the values
    when they are built): a choice where it has choices, else one of the field's type."""
    samples = {}
    for action in transformers.HfArgumentParser(arguments)._actions:
        if not action.option_strings or action.dest in samples:
            continue
        if action.choices:
            value = str(list(action.choices)[-1])
        else:
            value = {int: "3", float: "0.5", transformers.hf_argparser.string_to_bool: "true"}.get(action.type, "x")
            value = "{}" if action.type is dict or dataclasses.is_dataclass(action.type) else value
            value = '{"key": true}' if typing.get_origin(action.type) is dict else value
            if isinstance(action.type, type) and issubclass(action.type, enum.Enum):
                value = list(action.type)[0].value
        samples[action.dest] = [value]
    return samples


@pytest.mark.parametrize("family", FAMILIES)
def test_every_trainer_field_parses_from_the_command_line(family):
    """Every field of transformers' arguments class is a `train` flag under its own name, in both spellings
    (`--save_only_model`, `--save-only-model`): the options are a subclass of that class, read by HfArgumentParser."""
    from plldr_hf.training import options as module
    from plldr_hf_cli.commands.train import options_parser

    options_class = module.TrainOptions if family == "pldrllm" else module.TranslationOptions
    parser = options_parser(options_class, f"plldr-hf train {family}")
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    samples = _samples(FAMILIES[family])
    fields = [field for field in dataclasses.fields(FAMILIES[family]) if field.init]
    for field in fields:
        for spelling in (f"--{field.name}", f"--{field.name.replace('_', '-')}"):
            given = vars(parser.parse_args([spelling, *samples[field.name]]))
            assert list(given) == [field.name], (spelling, given)
    assert len(fields) >= 100


def test_trainer_fields_reach_the_training_arguments(tmp_path):
    """`--save_only_model --lr_scheduler_type linear --adam_beta2 0.99` (under their own names) and the older
    spellings end up in the arguments the Trainer gets; the recipe's other values stay."""
    from plldr_hf_cli.commands.train import options_of

    options = options_of(
        "pldrllm",
        ["--tiny", "--output-dir", str(tmp_path), "--save_only_model", "--lr_scheduler_type", "linear",
         "--adam-beta2", "0.99", "--learning_rate", "0.002", "--batch-size", "4", "--data_seed", "7"],
    )[0]  # fmt: skip
    assert options.save_only_model is True and options.lr_scheduler_type.value == "linear"
    assert (options.adam_beta2, options.learning_rate) == (0.99, 0.002)
    assert (options.per_device_train_batch_size, options.data_seed) == (4, 7)
    assert options.adam_beta1 == 0.9 and options.weight_decay == 0.1  # the recipe's


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data_seed", "many"], "--data-seed: must be an integer, got 'many'"),
        (["--save_total_limit", "many"], "--save-total-limit: must be a positive integer, got 'many'"),
        (["--lr_scheduler_type", "sideways"], "--lr-scheduler-type: must be one of linear, cosine"),
        (["--optim", "sideways"], "--optim"),
        (["--no_such_field", "1"], "unrecognized arguments: --no_such_field 1"),
        (["--fp16", "maybe"], "--fp16"),
    ],
)
def test_a_bad_trainer_field_is_one_line(capsys, argv, message):
    from plldr_hf.cli import main

    try:
        status = main(["train", "pldrllm", "--tiny", *argv])
    except SystemExit as exited:  # refused while parsing
        status = exited.code
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("spelling", ["--trainer-arg", "--trainer_arg", "--trainer-arg=save_only_model=true"])
def test_the_removed_trainer_arg_flag_names_its_replacement(capsys, spelling):
    """`--trainer-arg KEY=VALUE` is gone (every field is a flag of its own name): one line saying which spelling to
    use instead, before anything runs."""
    from plldr_hf.cli import main

    argv = ["train", "agf", "--tiny", spelling, *([] if "=" in spelling else ["save_only_model=true"])]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    assert "this flag was removed" in err and "--save_only_model true" in err, err
