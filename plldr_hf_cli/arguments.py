"""Argument types and checks shared by the commands: a mistake is one line naming the flag and the fix.

Nothing here imports torch, transformers or `plldr_hf`: the parser is built without them.
"""

import argparse
import importlib.util
import sys
from pathlib import Path


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
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value:g}")
    return value


def looks_like_path(spec: str) -> bool:
    """A `--dataset` entry meant as a local file or folder (not a dataset name such as `wmt17` or `org/name`)."""
    return spec.startswith((".", "/", "~")) or spec.lower().endswith(DATA_SUFFIXES) or Path(spec).exists()


def missing_dataset_files(specs) -> list[str]:
    """The `--dataset` entries meant as local paths that do not exist (`SPLIT=PATH` entries by their path)."""
    paths = [
        spec.split("=", 1)[1] if "=" in spec and spec.split("=", 1)[0].isidentifier() else spec for spec in specs or ()
    ]
    return [path for path in paths if looks_like_path(path) and not Path(path).expanduser().exists()]


def run_creating(command: str, output_dir, work):
    """Run `work()`; on a user-facing error (bad value, missing file) print one line, exit status 2, and remove
    `output_dir` if this run created it, so no half-made output folder is left behind."""
    import shutil

    output_dir = Path(output_dir) if output_dir else None
    existed = output_dir is not None and output_dir.exists()
    try:
        return work()
    except (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError) as error:
        if output_dir is not None and not existed and output_dir.exists():
            shutil.rmtree(output_dir, ignore_errors=True)
        return fail(command, error)


def fail(command: str, message: str) -> int:
    """Print `plldr-hf COMMAND: error: MESSAGE` on one line; the exit status of a usage mistake."""
    print(f"plldr-hf {command}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def load_light_module(name: str):
    """A module of `plldr_hf` that imports only the standard library (run options, the names of the position
    encodings), without running `plldr_hf/__init__.py`, which imports torch: `--help` and usage errors stay fast.
    The file is loaded by path and registered under its own name, so the package imported later uses this same
    module (and its classes)."""
    if name in sys.modules:
        return sys.modules[name]
    package = importlib.util.find_spec("plldr_hf")  # finds the package without importing it
    path = Path(package.submodule_search_locations[0], *name.split(".")[1:]).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
