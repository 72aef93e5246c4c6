"""Argument types and checks shared by the commands: a mistake is one line naming the flag and the fix.

Nothing here imports torch, transformers or `plldr_hf`: the parser is built without them.
"""

import argparse
import importlib.util
import logging
import math
import os
import sys
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
NOT_READ_DESTS = ("func", "resume", "resume_from_checkpoint")


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
    """A module of `plldr_hf` that imports only the standard library (the names of the position encodings, the
    loaders' folder checks), loaded by its file without running `plldr_hf/__init__.py`, which imports torch: `--help`
    and usage errors stay fast. It is registered under its own name, so the package imported later uses the same
    module (and its classes)."""
    if name not in sys.modules:
        package = importlib.util.find_spec("plldr_hf")  # finds the package without importing it
        path = Path(package.submodule_search_locations[0]).joinpath(*name.split(".")[1:]).with_suffix(".py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
