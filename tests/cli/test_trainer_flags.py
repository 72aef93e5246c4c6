"""Every field of transformers' `TrainingArguments` (`train pldrllm`) and `Seq2SeqTrainingArguments` (`train agf`)
is a command-line flag under its own name: it reaches the option that covers it, or the run's `trainer_args`."""

import dataclasses
import enum
import typing

import pytest
import transformers

from plldr_hf_cli import build_parser, parse_args
from plldr_hf_cli.commands.train import agf as agf_command
from plldr_hf_cli.commands.train import pldrllm as pldrllm_command


FAMILIES = {
    "pldrllm": (pldrllm_command, transformers.TrainingArguments),
    "agf": (agf_command, transformers.Seq2SeqTrainingArguments),
}


def _samples(arguments) -> dict[str, list[str]]:
    """A value `HfArgumentParser` reads for each field (parsing only: transformers checks the values when the run
    builds its arguments): a choice where it has choices, else one of the field's type."""
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


def _option_value(spec) -> list[str]:
    """A valid command-line value for an options field (none for on/off flags)."""
    kind = str(spec.type).replace(" ", "")
    if kind in ("bool", "bool|None"):
        return []
    if spec.name == "resume":
        return ["last"]
    if spec.name == "report_to":
        return ["none"]
    if spec.name == "scheduler":
        return ["linear"]
    if kind.startswith("int"):
        return ["3"]
    if kind.startswith("float"):
        return ["0.5"]
    return ["somewhere"]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_trainer_field_parses_from_the_command_line(family):
    command, arguments = FAMILIES[family]
    options_class = command.options_class()
    specs = {spec.name: spec for spec in dataclasses.fields(options_class)}
    parser = build_parser()
    samples = _samples(arguments)
    fields = [field for field in dataclasses.fields(arguments) if field.init]
    to_options = to_trainer = 0
    for field in fields:
        option = options_class.TRAINER_FIELDS.get(field.name, field.name)
        for spelling in (f"--{field.name}", f"--{field.name.replace('_', '-')}"):
            if option in specs:
                args = parse_args(parser, ["train", family, spelling, *_option_value(specs[option])])
                assert hasattr(args, option), (field.name, spelling)
                assert field.name not in dict(getattr(args, "trainer_args", [])), field.name
            else:
                args = parse_args(parser, ["train", family, spelling, *samples[field.name]])
                assert field.name in dict(args.trainer_args), (field.name, spelling)
        if option in specs:
            to_options += 1
        else:
            options = command.options_from(args)  # the options accept it (a field of the arguments class)
            assert field.name in options.trainer_args
            to_trainer += 1
    assert to_options >= 10 and to_trainer >= 80 and to_options + to_trainer == len(fields)


def test_trainer_fields_reach_the_training_arguments(tmp_path):
    """`--save_only_model --lr_scheduler_type linear --adam_beta2 0.99` (under their own names) and the options'
    own spellings end up in the TrainingArguments the run builds; the recipe's other values stay."""
    from plldr_hf.training.recipes import causal_lm_recipe

    args = parse_args(
        build_parser(),
        ["train", "pldrllm", "--tiny", "--output-dir", str(tmp_path), "--save_only_model", "--lr_scheduler_type",
         "linear", "--adam-beta2", "0.99", "--learning_rate", "0.002", "--per_device_train_batch_size", "4",
         "--data_seed", "7"],
    )  # fmt: skip
    options = pldrllm_command.options_from(args).resolved()
    training_args, _ = causal_lm_recipe(options)
    assert training_args.save_only_model is True and training_args.lr_scheduler_type.value == "linear"
    assert (training_args.adam_beta2, training_args.learning_rate) == (0.99, 0.002)
    assert (training_args.per_device_train_batch_size, training_args.data_seed) == (4, 7)
    assert training_args.adam_beta1 == 0.9 and training_args.weight_decay == 0.1  # the recipe's


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data_seed", "many"], "argument --data_seed/--data-seed: invalid int value: 'many'"),
        (["--save_total_limit", "many"], "--save-total-limit: must be a positive integer, got 'many'"),
        (["--lr_scheduler_type", "sideways"], "--lr_scheduler_type"),
        (["--no_such_field", "1"], "unrecognized arguments: --no_such_field 1"),
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


def test_python_api_refuses_trainer_args_an_option_covers():
    """The Python API and the command line refuse the same: a trainer field that an option sets is given through
    the option; a name that is no field is named."""
    from plldr_hf.training import TrainOptions, TranslationOptions

    with pytest.raises(
        ValueError, match="trainer_args learning_rate: it is an option of its own; use --learning-rate"
    ):
        TrainOptions(trainer_args={"learning_rate": 1e-3})
    with pytest.raises(ValueError, match="per_device_train_batch_size: .* use --batch-size"):
        TranslationOptions(trainer_args={"per_device_train_batch_size": 8})
    with pytest.raises(ValueError, match="trainer_args no_such: TrainingArguments has no such field"):
        TrainOptions(trainer_args={"no_such": 1})
    with pytest.raises(ValueError, match="trainer_args: must be a mapping of FIELD to value"):
        TrainOptions(trainer_args=["save_only_model=true"])
    assert TrainOptions(trainer_args={"save_only_model": True}).trainer_args == {"save_only_model": True}
