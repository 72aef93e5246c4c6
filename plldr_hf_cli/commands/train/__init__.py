"""`plldr-hf train FAMILY ...`: one command path for every model family.

Every module in `plldr_hf_cli/commands/train/` describes one family's command line: `DESCRIPTION` (its help),
`OPTIONS` names its options class (a `TrainingArguments` subclass in `plldr_hf.training.options`),
`default_recipe(given)` the recipe its flags start from when none is named, and `summary(report)` gives the lines
printed after the run. Everything after `train FAMILY` is read by transformers' `HfArgumentParser` over the options
class (`options_from_argv` below): every field a flag of its own name. The run itself is the same for all (`run` below): the options, the paths refused before any work, then
`plldr_hf.training.run.train(options)` in the output folder, and the family's summary of the `RunReport`.
"""

import argparse
import copy
import dataclasses
import importlib
import json
import pkgutil
import typing
from functools import partial

from plldr_hf_cli.arguments import UsageError, fail, output_overlaps_input, refuse_run_paths, show_pipeline_logs
from plldr_hf_cli.output import add_overwrite_flag, interrupts_deferred, run_in_folder


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model (one subcommand per model family)",
        description="Train a model. Choose the model family; `plldr-hf train FAMILY --help` lists its options.",
    )
    families = parser.add_subparsers(dest="family", metavar="FAMILY", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        family = importlib.import_module(f"{__name__}.{info.name}")
        # the flags are the options' own (read in `run`, after the package is imported): none here
        sub = families.add_parser(info.name, add_help=False, **family.DESCRIPTION)
        sub.set_defaults(func=partial(run, family), option_argv=[])


def options_of(family: str, argv: list[str]):
    """What `plldr-hf train FAMILY ARGV...` reads, without running it: (options, the flags as given, `--overwrite`).
    A flag argparse cannot read raises `UsageError`, a value the options refuse `ValueError`."""
    import plldr_hf.training.options as module

    spec = importlib.import_module(f"{__name__}.{family}")
    options_class = getattr(module, spec.OPTIONS)
    return options_from_argv(options_class, argv, f"plldr-hf train {family}", spec.default_recipe)


def run(family, args: argparse.Namespace) -> int:
    """`plldr-hf train FAMILY`: the family's options from the flags, trained in `--output-dir`."""
    command = f"train {args.family}"
    try:
        options, given, overwrite = options_of(args.family, args.option_argv)
    except UsageError as error:
        return fail(command, f"{error} (see plldr-hf {command} --help)")
    except ValueError as error:
        return fail(command, error)
    args.output_dir = options.output_dir  # the interrupt's hint names the run's folder
    problem = output_overlaps_input(argparse.Namespace(**{**given, "output_dir": options.output_dir}))
    refused = fail(command, problem) if problem else refuse_run_paths(command, options)
    if refused:
        return refused
    # the pipeline's own progress lines (data, tokenizer, model size); other libraries keep their verbosity
    show_pipeline_logs()
    with interrupts_deferred():  # torch and the pipeline's libraries load whole before the run takes its folder
        from plldr_hf.training.run import pipeline_of

        pipeline_of(options)
    return run_in_folder(
        command,
        options.output_dir,
        lambda: train_and_report(options, family.summary),
        overwrite=overwrite,
        resume=bool(options.resume_from_checkpoint),
    )


def train_and_report(options, summary) -> int:
    """Train `options` and print the family's summary of the run's report (on the main process)."""
    from plldr_hf.training.run import train

    report = train(options)
    if report.main_process:
        for line in summary(report):
            print(line)
        print(f"report: {report.path}; curves: {report.loss_curves or 'not plotted (too few logged steps)'}")
    return 0


def _number_or_text(kind: type):
    """An argparse type that reads a number where it can and hands anything else over as text: the options check
    every value (`plldr_hf.training.options.check_value`), so a mistake reads the same from the command line and
    from the Python API."""

    def read(text: str):
        for reader in (kind, float):  # "1.5" for an integer is refused as the number it is
            try:
                return reader(text)
            except ValueError:
                continue
        return text

    read.__name__ = kind.__name__
    return read


def options_parser(options_class, prog: str):
    """transformers' `HfArgumentParser` over a family's options (`TrainOptions`, `TranslationOptions`): every field
    a flag of its own name and of its `aliases`, plus `--recipe` / `--tiny` (the recipe the flags start from) and
    `--overwrite`. Numbers and the fields the options parse themselves reach the options as typed, so the options'
    checks name every mistake; a flag argparse cannot read is one line (`UsageError`)."""
    from transformers import HfArgumentParser

    class OptionsParser(HfArgumentParser):
        @staticmethod
        def _parse_dataclass_field(parser, field):
            meta = dict(field.metadata)
            if meta.pop("cli", True) is False:
                return
            parse, false_flag = meta.pop("parse", False), meta.pop("false_flag", None)
            meta.pop("min", None), meta.pop("unset", None)
            choices = meta.pop("choices", None)  # checked by the options, with the message the Python API gives
            if choices is not None:
                meta.setdefault("metavar", "{" + ",".join(map(str, choices)) + "}")
            if meta.get("action") == "append":
                meta["type"] = str
            HfArgumentParser._parse_dataclass_field(parser, _with_metadata(field, meta))
            action = next(a for a in parser._actions if a.dest == field.name)  # the field's flag, not its --no_ twin
            if parse:
                action.type = str
            elif action.type in (int, float):
                action.type = _number_or_text(action.type)
            elif action.type is dict or typing.get_origin(action.type) is dict:
                action.type = _json_object  # HfArgumentParser would call `dict("...")`
            elif dataclasses.is_dataclass(action.type):
                config_class = action.type  # a config class (`--parallelism_config`): its fields as a JSON object
                action.type = lambda text: config_class(**_json_object(text))
            if false_flag:
                parser.add_argument(false_flag, dest=field.name, action="store_false", help=argparse.SUPPRESS)

        def error(self, message):
            raise UsageError(message)

    class Help(argparse.HelpFormatter):
        """The default after the help, where there is one to show."""

        def _get_help_string(self, action):
            default = action.default
            if default in (None, False, "", [], {}, argparse.SUPPRESS) or "%(default)" in (action.help or ""):
                return action.help
            return f"{action.help or ''} [default: %(default)s]"

    from plldr_hf.training.recipes import PRESETS, RECIPE_FOLDER

    parser = OptionsParser(options_class, prog=prog, allow_abbrev=False, formatter_class=Help)
    shipped = PRESETS[options_class.FAMILY]
    tiny = ", ".join(f"{key} {value}" for key, value in shipped["tiny"]["run"].items())
    parser.add_argument(
        "--recipe",
        metavar="NAME_OR_FILE",
        help=f"start from a recipe: one of {', '.join(shipped)} ({RECIPE_FOLDER / options_class.FAMILY}) or a "
        '.json / .yaml file {"extends": NAME, "model": {config fields}, "run": {options}}; flags still win',
    )
    parser.add_argument("--tiny", action="store_true", help=f"CPU smoke run in seconds: --recipe tiny ({tiny})")
    add_overwrite_flag(parser, "--output-dir")
    return parser


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expects a JSON object such as '{{\"key\": 1}}', got {text!r}")
    return value


def _with_metadata(field, metadata: dict):
    clone = copy.copy(field)
    clone.metadata = metadata
    return clone


def options_from_argv(options_class, argv: list[str], prog: str, default_recipe=None):
    """The options of a `train` command line: the recipe's values (`--recipe`, `--tiny`, else `default_recipe` of
    the given flags), then every flag given; `--help` prints the flags and exits. Returns (options, the flags as
    given, `--overwrite`)."""
    if {"-h", "--help"} & set(argv):
        options_parser(options_class, prog).parse_args(["--help"])  # prints the flags with their defaults, exits
    parser = options_parser(options_class, prog)
    for action in parser._actions:
        if action.dest != "help":
            action.default = argparse.SUPPRESS  # only what is given: a recipe's values stay under the flags
    given = vars(parser.parse_args(argv))
    recipe, tiny, overwrite = given.pop("recipe", None), given.pop("tiny", False), given.pop("overwrite", False)
    if recipe and tiny:
        raise ValueError(f"--tiny is --recipe tiny; give one of them, not both (--recipe {recipe})")
    recipe = recipe or ("tiny" if tiny else default_recipe(given) if default_recipe else None)
    options = options_class.from_name(recipe, **given) if recipe else options_class(**given)
    return options, given, overwrite
