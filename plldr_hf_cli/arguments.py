"""Argument types and checks shared by the commands: a mistake is one line naming the flag and the fix.

Nothing here imports torch, transformers or `plldr_hf`: the parser is built without them.
"""

import argparse
import dataclasses
import importlib.util
import logging
import math
import os
import sys
import typing
from functools import partial
from pathlib import Path


class UsageError(Exception):
    """A mistake in what the user asked for; `plldr_hf_cli.main` prints it as one line with exit status 2."""

    exit_status = 2


DATA_SUFFIXES = (".txt", ".text", ".md", ".json", ".jsonl", ".parquet", ".csv", ".tsv", ".gz", ".bz2", ".xz", ".zst")


def _integer(text: str, minimum: int, kind: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a {kind} integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be a {kind} integer, got {value}")
    return value


def positive_int(text: str) -> int:
    return _integer(text, 1, "positive")


def non_negative_int(text: str) -> int:
    return _integer(text, 0, "non-negative")


def positive_float(text: str) -> float:
    """A finite number > 0; NaN, infinities, zero and negatives are refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text}")
    return value


def bounded_int(low: int, high: int):
    """An integer type for argparse within [low, high] (sizes that allocate: a bound keeps a typo from asking for
    terabytes)."""

    def parse(text: str) -> int:
        value = _integer(text, low, "positive" if low == 1 else "non-negative")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}, got {value:,}")
        return value

    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


def non_negative_float(text: str) -> float:
    """A finite number ≥ 0 (a tolerance, a weight decay); NaN, infinities and negatives are refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite non-negative number, got {text}")
    return value


def _flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def non_finite_values(args: argparse.Namespace, flags: dict | None = None) -> list[str]:
    """`FLAG=VALUE` for every NaN or infinite number among the parsed values, lists and `KEY=VALUE` dicts
    (`--set`, the TrainingArguments fields a train command takes by name) included: every numeric flag of every
    command, those written later too."""

    def bad(value) -> bool:
        return isinstance(value, float) and not math.isfinite(value)

    found = []
    for dest, value in vars(args).items():
        items = (
            value.items()
            if isinstance(value, dict)
            else [(None, v) for v in value]
            if isinstance(value, (list, tuple))
            else [(None, value)]
        )
        for key, item in items:
            if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str):
                key, item = item  # repeated KEY=VALUE flags before they become a dict
            if bad(item):
                found.append(f"{(flags or {}).get(dest, _flag_name(dest))} {key + '=' if key else ''}{item}")
    return found


# argument destinations that name what a command writes; every other argument naming an existing path is read,
# except `--resume CHECKPOINT`: a resumed run continues in the folder that holds its checkpoints
OUTPUT_DESTS = ("output_dir", "output_json", "hypotheses", "dry_run", "output")
NOT_READ_DESTS = ("func", "resume")


def _read_paths(args: argparse.Namespace) -> list[tuple[str, Path]]:
    found = []
    for dest, value in vars(args).items():
        if dest in OUTPUT_DESTS or dest in NOT_READ_DESTS:
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if not isinstance(item, str) or not item or item == "-":
                continue
            # `--dataset SPLIT=PATH`
            text = item.split("=", 1)[1] if "=" in item and item.split("=", 1)[0].isidentifier() else item
            try:
                path = Path(text).expanduser()
                if path.exists():
                    found.append(
                        (_flag_name(dest) if dest not in ("model_dir", "pth") else dest.upper(), path.resolve())
                    )
            except (OSError, ValueError):
                continue
    return found


def _inside(child: Path, parent: Path) -> bool:
    return child != parent and parent in child.parents


# outputs that are single files (the others are folders)
FILE_OUTPUT_DESTS = ("output_json", "hypotheses", "output")


def output_file_problem(args: argparse.Namespace) -> str | None:
    """Why a file output cannot be written (a folder, or a file where its folder should be), checked before any
    work; a missing folder is created when the output is written."""
    for dest in FILE_OUTPUT_DESTS:
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value:
            continue
        path = Path(value).expanduser()
        if path.is_dir():
            return f"{_flag_name(dest)} {value} is a folder; give a file path"
        blocking = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
        if blocking is not None:
            return f"{_flag_name(dest)} {value}: {blocking} is a file, not a folder; give another path"
    return None


def output_overlaps_input(args: argparse.Namespace) -> str | None:
    """Why an output of this command would write onto what it reads (None: it would not). The rule, for every
    command: an output may not be an input, may not hold an input (a folder replaced with --overwrite would delete
    it), and may not replace anything that exists inside an input folder (a new file there loses nothing)."""
    reads = _read_paths(args)
    for dest in OUTPUT_DESTS:
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value:
            continue
        try:
            out = Path(value).expanduser().resolve()
        except (OSError, ValueError):
            continue
        positional = dest == "output_dir" and getattr(args, "command", None) in ("collapse", "convert", "lm-eval-task")
        flag = "OUT_DIR" if positional else _flag_name(dest)
        for name, path in reads:
            if out == path:
                return f"{flag} {value} is also the input {name}; write the output somewhere else"
            if _inside(path, out):
                return f"{flag} {value} holds the input {name} ({path}); choose an output folder outside it"
            if _inside(out, path) and out.exists():
                return (
                    f"{flag} {value} would replace {out.name} inside the input {name} ({path}); choose a path "
                    "outside it"
                )
    return None


def looks_like_path(spec: str) -> bool:
    """A `--dataset` entry meant as a local file or folder (not a dataset name such as `wmt17` or `org/name`)."""
    return spec.startswith((".", "/", "~")) or spec.lower().endswith(DATA_SUFFIXES) or Path(spec).exists()


def missing_dataset_files(specs) -> list[str]:
    """The `--dataset` entries meant as local paths that do not exist (`SPLIT=PATH` entries by their path)."""
    paths = [
        spec.split("=", 1)[1] if "=" in spec and spec.split("=", 1)[0].isidentifier() else spec for spec in specs or ()
    ]
    import glob

    def found(path: str) -> bool:
        # a glob (`shards/*.parquet`, for --streaming) counts when it matches a file
        expanded = str(Path(path).expanduser())
        return bool(glob.glob(expanded)) if glob.has_magic(expanded) else Path(expanded).exists()

    return [path for path in paths if looks_like_path(path) and not found(path)]


def output_is_a_file(command: str, path) -> int | None:
    """Exit status 2 with one line when an output folder path names an existing file (checked before any work);
    None when the path is usable."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        return fail(command, f"{path} is a file, not a folder; give a folder for the output")
    return None


def refuse_run_paths(command: str, options) -> int | None:
    """Exit status 2 with one line when a training run's output folder is a file or a `--dataset` path does not
    exist (both checked before any work); None when the run may start."""
    refused = output_is_a_file(command, options.output_dir)
    if refused:
        return refused
    missing = missing_dataset_files(options.dataset)
    if missing:
        return fail(
            command, f"--dataset: {missing[0]} does not exist or matches no file; give existing files or folders"
        )
    return None


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record is emitted (a command run in-process by a test or a
    notebook may have replaced it since the handler was made)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def show_pipeline_logs(fmt: str = "%(message)s") -> None:
    """The pipeline's own progress lines (`plldr_hf` loggers at INFO) on stderr; other libraries stay at WARNING.
    Installed once per process."""
    root = logging.getLogger()
    if not any(isinstance(handler, _CurrentStderr) for handler in root.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter(fmt))
        root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    # one process speaks for a run of several (torchrun, accelerate launch); the others log only problems
    logging.getLogger("plldr_hf").setLevel(logging.INFO if os.environ.get("RANK", "0") == "0" else logging.WARNING)


def non_finite_scores(results: dict, prefix: str = "") -> list[str]:
    """`SPLIT METRIC=VALUE` for every NaN or infinite number in a command's nested score dicts."""
    found = []
    for key, value in results.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            found += non_finite_scores(value, f"{name} ")
        elif isinstance(value, float) and not math.isfinite(value):
            found.append(f"{name}={value}")
    return found


def refuse_non_finite_scores(command: str, results: dict) -> int:
    """0 when every score is finite; else one line naming them, exit status 1 (the scores are printed and saved
    above it, and are not usable)."""
    bad = non_finite_scores(results)
    if not bad:
        return 0
    print(
        f"plldr-hf {command}: error: scores that are not finite ({', '.join(bad[:4])}): the model's weights or "
        "activations are not finite (damaged or diverged weights?); these scores are not usable",
        file=sys.stderr,
    )
    return 1


def fail(command: str, message: str) -> int:
    """Print `plldr-hf COMMAND: error: MESSAGE` on one line; the exit status of a usage mistake."""
    print(f"plldr-hf {command}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def load_light_module(name: str):
    """A module of `plldr_hf` that imports only the standard library (run options, the names of the position
    encodings), without running `plldr_hf/__init__.py`, which imports torch: `--help` and usage errors stay fast.
    The options module is loaded by its path, the others through its `light_module`; each is registered under its own
    name, so the package imported later uses the same module (and its classes)."""
    options = "plldr_hf.training.options"
    if options not in sys.modules:
        package = importlib.util.find_spec("plldr_hf")  # finds the package without importing it
        spec = importlib.util.spec_from_file_location(
            options, Path(package.submodule_search_locations[0], "training", "options.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[options] = module
        spec.loader.exec_module(module)
    return sys.modules[options].light_module(name)


def _read_as(kind: type):
    """An argparse type that reads a number where it can and hands anything else over as text: the options
    dataclass checks every value (`plldr_hf.training.options.check_field`), so a mistake reads the same from the
    command line and from the Python API."""

    def read(text: str):
        for reader in (kind, float):  # "1.5" for an integer is refused as the number it is
            try:
                return reader(text)
            except ValueError:
                continue
        return text

    read.__name__ = kind.__name__
    return read


def _flag_type(annotation: str, meta: dict, module):
    if meta.get("parse") == "parse_key_value":
        parse = module.parse_key_value

        def typed(text):
            try:
                return parse(text)
            except ValueError as err:
                raise argparse.ArgumentTypeError(str(err)) from None

        return typed
    if "parse" in meta:
        return None  # text, parsed by the dataclass
    if annotation.startswith("int"):
        return _read_as(int)
    if annotation.startswith("float"):
        return _read_as(float)
    return None


def _default_text(spec) -> str | None:
    if spec.default is not dataclasses.MISSING:
        value = spec.default
    elif spec.default_factory is not dataclasses.MISSING:
        value = spec.default_factory()
    else:
        return None
    if value is None or value in ([], {}, ()) or isinstance(value, bool):
        return None
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value)) if isinstance(value, list) else ",".join(map(str, value))
    return str(value).replace("%", "%%")


def add_option_flags(parser, options_class) -> None:
    """One flag per field of an options dataclass (`plldr_hf.training.options`): type, choices and help from the
    field's metadata, the field's default shown in the help. Flags default to "not given" (absent from the parsed
    namespace), so `options_from_args` can put them over a preset's values. Values are checked by the dataclass
    itself, so the command line and the Python API refuse the same things with the same message.

    argparse is used directly rather than transformers' `HfArgumentParser`: that one spells flags `--field_name`
    first, needs a value for `bool | None` fields (`--bf16 true`) and has no custom parsers
    (`--dag-weights 0.1,0.1,0.1`), which the commands' users rely on."""
    module = sys.modules[options_class.__module__]
    groups = {}
    for spec in dataclasses.fields(options_class):
        meta = dict(spec.metadata)
        if meta.pop("cli", True) is False:
            continue
        group_name = meta.pop("group", None)
        if group_name is not None and group_name not in groups:
            groups[group_name] = parser.add_argument_group(group_name)
        target = groups.get(group_name, parser)
        flag = meta.pop("flag", _flag_name(spec.name))
        help_text = meta.pop("help", "")
        default = _default_text(spec)
        kwargs = {"default": argparse.SUPPRESS, "dest": spec.name}
        kwargs["help"] = f"{help_text} [default: {default}]" if default is not None else help_text
        annotation = str(spec.type)
        action = meta.pop("action", None)
        if action == "boolean_optional":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif action == "store_false":
            kwargs["action"] = "store_false"
        elif annotation == "bool":
            kwargs["action"] = "store_true"
        else:
            if action == "append":
                kwargs["action"] = "append"
            kwargs["type"] = _flag_type(annotation, meta, module)
            choices = module.choices_of(spec)
            if choices is not None:
                kwargs["metavar"] = "{" + ",".join(map(str, choices)) + "}"
            for key in ("metavar", "nargs", "const"):
                if key in meta:
                    kwargs[key] = meta[key]
        target.add_argument(flag, **kwargs)
        # the names transformers' TrainingArguments gives the same setting (`--learning_rate`,
        # `--per_device_train_batch_size`) work too, hidden from --help
        names = {spec.name} | {
            field for field, option in getattr(options_class, "TRAINER_FIELDS", {}).items() if option == spec.name
        }
        aliases = {f"--{name}" for name in names} | {f"--{name.replace('_', '-')}" for name in names}
        aliases -= {flag}
        if aliases:
            target.add_argument(*sorted(aliases), **{**kwargs, "help": argparse.SUPPRESS})


def _json_object(text: str) -> dict:
    import json

    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expects a JSON object such as '{{\"key\": 1}}', got {text!r}")
    return value


def _json_config(config_class, text: str):
    return config_class(**_json_object(text))


def trainer_field_flags(options_class, argv: list[str]) -> tuple[list[tuple[str, object]], list[str]]:
    """The flags among `argv` that are fields of the family's transformers arguments class under their own names
    (`--save_only_model`, `--push-to-hub`, `--deepspeed ds.json`), parsed as `HfArgumentParser` parses them, and
    the arguments left over. Imports transformers: called only when a train command has flags its options lack."""
    import transformers

    class Parser(transformers.HfArgumentParser):
        def error(self, message):
            raise UsageError(message)

    parser = Parser(getattr(transformers, options_class.TRAINER_ARGUMENTS), add_help=False)
    for action in parser._actions:
        action.default, action.required = argparse.SUPPRESS, False  # only what is given
        # fields typed as a dict or a config class (HfArgumentParser would call `dict("...")`): JSON objects
        if action.type is dict or typing.get_origin(action.type) is dict:
            action.type = _json_object
        elif dataclasses.is_dataclass(action.type):
            action.type = partial(_json_config, action.type)
    given, rest = parser.parse_known_args(argv)
    return sorted(vars(given).items()), rest


def add_recipe_flags(parser, options_class) -> None:
    """`--recipe NAME_OR_PATH` (a shipped recipe, `plldr_hf/recipes/FAMILY/NAME.json`, or a file of the same shape)
    and its shorthand `--tiny`: the recipe's model and run settings, under every flag given."""
    module = sys.modules[options_class.__module__]
    shipped = module.PRESETS[options_class.FAMILY]
    tiny = ", ".join(f"{key} {value}" for key, value in shipped["tiny"]["run"].items())
    parser.add_argument(
        "--recipe",
        metavar="NAME_OR_FILE",
        help=f"start from a recipe: one of {', '.join(shipped)} ({module.RECIPE_FOLDER / options_class.FAMILY}) or "
        'a .json / .yaml file {"extends": NAME, "model": {config fields}, "run": {options}}; flags still win',
    )
    parser.add_argument(
        "--tiny", action="store_true", help=f"CPU smoke run in seconds: --recipe tiny ({tiny}); flags still win"
    )


def recipe_of(args: argparse.Namespace, default: str | None = None) -> str | None:
    """The recipe a train command starts from: `--recipe`, else `--tiny`'s, else `default`."""
    if getattr(args, "recipe", None) and getattr(args, "tiny", False):
        raise ValueError(f"--tiny is --recipe tiny; give one of them, not both (--recipe {args.recipe})")
    return getattr(args, "recipe", None) or ("tiny" if getattr(args, "tiny", False) else default)


def options_from_args(args: argparse.Namespace, options_class, preset: str | None = None):
    """The options dataclass from parsed flags: the preset's values (or the field defaults), then every flag given.
    Repeated `KEY=VALUE` flags become a dict."""
    given = {}
    for spec in dataclasses.fields(options_class):
        if hasattr(args, spec.name):
            value = getattr(args, spec.name)
            if spec.metadata.get("action") == "append":
                value = dict(value)
            given[spec.name] = value
    if preset is None:
        return options_class(**given)
    return options_class.from_name(preset, **given)
