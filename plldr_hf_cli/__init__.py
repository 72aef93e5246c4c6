"""`plldr-hf` command line: one argparse subcommand per module in `plldr_hf_cli/commands/`.

Each module in `plldr_hf_cli.commands` defines `register(subparsers)`, which adds its subcommand(s) and sets
`func` on the parser defaults; this file only discovers them, so adding a command never touches this file.

The command line lives outside the `plldr_hf` package because `import plldr_hf` registers the model families (and
so imports torch and transformers, seconds); parsing, `--help` and usage errors need neither. Each command imports
`plldr_hf` inside its `run` function.
"""

import argparse
import importlib
import os
import pkgutil
import sys

from plldr_hf_cli import commands


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line naming the flag, with the pointer to `--help`."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    # the installed distribution's version, read without importing plldr_hf (which imports torch)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("plldr_hf")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="plldr-hf",
        description="PLDR-LLM and AGF translation models for Hugging Face Transformers.",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the libraries' INFO messages and loading/saving progress bars"
    )
    parser.add_argument("--version", action="version", version=f"plldr-hf {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def wait_threads_passively_when_busy(threads: int | None = None) -> bool:
    """On a busy machine, make OpenMP threads sleep while they wait for each other (`OMP_WAIT_POLICY=PASSIVE`), set
    before torch starts OpenMP. Busy: the 1-minute load average plus this run's threads (`threads`; torch's
    default: every CPU) exceeds the CPU count by more than half a CPU. Spinning threads then burn the time slices the
    threads they wait for need: measured on 2 CPUs with 3 other busy processes, the quickstart's translator step went
    from 163 ms to 1,258 ms (7.7x) spinning and from 253 ms to 553 ms (2.2x) sleeping; idle, sleeping costs 1.2-1.7x,
    so an idle machine keeps the default (`benchmarks/results/threads_under_load.md`). The wait changes no
    arithmetic: the scores stay the same. A policy the user set is kept. Returns whether it was set."""
    if "OMP_WAIT_POLICY" in os.environ or not hasattr(os, "getloadavg"):
        return False
    cpus = os.cpu_count() or 1
    if os.getloadavg()[0] + (threads or cpus) <= cpus + 0.5:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def main(argv: list[str] | None = None) -> int:
    restore = quiet_import_noise()  # before anything imports transformers (the parsers do)
    try:
        return _main(argv)
    finally:
        restore()


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line: a usage mistake exits with status 2 and one line. A train command's flags are its
    options' (`option_argv`, read by the command once the package is imported)."""
    given = [item.split("=")[0] for item in (sys.argv[1:] if argv is None else argv)]
    removed = next((flag for flag in given if flag in ("--trainer-arg", "--trainer_arg")), None)
    if removed is not None:
        parser.error(
            f"{removed}: this flag was removed; give each TrainingArguments field as a flag of its own name, e.g. "
            "--save_only_model true --data_seed 7"
        )
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "option_argv"):
        args.option_argv, extra = extra, []
    if extra:
        # a command whose trailing positionals may come after its options (`translate DIR --num-beams 4 "text"`)
        # names them in `extra_positionals`; argparse would otherwise call the text an unrecognized argument
        dest = getattr(args, "extra_positionals", None)
        if dest is None or any(item.startswith("-") and item != "-" for item in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        getattr(args, dest).extend(extra)
    return args


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    from plldr_hf_cli.arguments import fail, non_finite_values, output_file_problem, output_overlaps_input

    # the command as the user typed it (`train pldrllm`), as its own refusals name it
    command = " ".join(filter(None, (args.command, getattr(args, "family", None))))
    bad = non_finite_values(args, option_names(parser))
    if bad:
        return fail(command, f"{bad[0]}: numbers must be finite (not NaN or infinite)")
    problem = output_overlaps_input(args) or output_file_problem(args)
    if problem:
        return fail(command, problem)
    refused = refuse_missing_model_folder(command, getattr(args, "model_dir", None))
    if refused:
        return refused
    wait_threads_passively_when_busy(getattr(args, "threads", None))
    restore = None if args.verbose else quiet_libraries()
    try:
        from plldr_hf_cli.output import interrupts_deferred

        with interrupts_deferred():  # every command runs on torch, transformers and the models: loaded whole
            import plldr_hf  # noqa: F401
        result = args.func(args)
    except KeyboardInterrupt:
        # one line for the run, from its main process (every process of a distributed launch gets the Ctrl-C), the
        # conventional status of SIGINT (128 + 2); training resumes from its last checkpoint
        if os.environ.get("RANK", "0") == "0":
            hint = _resume_hint(args) if args.command == "train" else ""
            close_progress_bars()
            print(f"\nplldr-hf {command}: interrupted{hint}", file=sys.stderr)
        return 130
    except Exception as error:
        # user-facing errors carry their exit status (`plldr_hf_cli.arguments.UsageError`, the loaders'
        # `ModelFolderError` and `WeightsMismatchError`): one line; anything else is a defect and keeps its traceback
        from huggingface_hub.errors import StrictDataclassError

        status = getattr(error, "exit_status", None)
        if status is None and isinstance(error, StrictDataclassError):
            status = 2  # a config value a model's `@strict` config refuses, named in the message
        if status is None:
            from plldr_hf_cli.output import file_system_fault

            fault = file_system_fault(error)  # a full disk or a file-size limit, wherever it was hit
            if fault is None:
                raise
            error, status = fault, 1
        print(f"plldr-hf {args.command}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return status
    finally:
        if restore is not None:
            restore()
    return int(result or 0)


def refuse_missing_model_folder(command: str, model_dir) -> int | None:
    """A MODEL_DIR that is written as a path and is not a readable saved model is refused before the command imports
    torch and transformers (seconds on a loaded machine): `plldr_hf.loading.read_config`, loaded without the package
    (it imports only the standard library for local folders). A Hub id is left to the command."""
    if not isinstance(model_dir, str):
        return None
    from plldr_hf_cli.arguments import fail, load_light_module

    loading = load_light_module("plldr_hf.loading")
    if loading.is_hub_id(model_dir):
        return None
    try:
        loading.read_config(model_dir)
    except loading.ModelFolderError as error:
        return fail(command, error)
    return None


def _resume_hint(args) -> str:
    """What an interrupted training run can do next: resume from its last checkpoint, or (none saved yet: by default
    only the end saves) start again."""
    from pathlib import Path

    output = getattr(args, "output_dir", None)
    if output and any(Path(output).glob("checkpoint-*")):
        return "; continue from the last checkpoint with the same command and --resume"
    return (
        "; no checkpoint was saved yet (by default only the end of a run saves; --save-steps N saves every N steps): "
        "rerun the same command with --overwrite to start again"
    )


def option_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The flag a user types for each argument destination, over every subcommand (`model_overrides` is
    `--set`)."""
    names = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names.update(option_names(sub))
        elif action.option_strings:
            names.setdefault(action.dest, max(action.option_strings, key=len))
    return names


def quiet_import_noise():
    """`plldr_hf.import_noise.quiet_import_noise`, loaded without importing the package (torch)."""
    from plldr_hf_cli.arguments import load_light_module

    return load_light_module("plldr_hf.import_noise").quiet_import_noise()


def quiet_libraries() -> None:
    """One-shot commands print their result, not the libraries' INFO lines or weight loading/saving bars; training
    keeps the Trainer's progress bar (long work). Set before the libraries are imported (environment), or through
    their APIs when they already are (commands called in-process)."""
    import os

    saved_env = {
        k: os.environ.get(k)
        for k in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY")
    }
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    undo = []
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        undo.append(lambda: hf_logging.set_verbosity(verbosity))
        undo.append(lambda: hf_logging.enable_progress_bar() if bars else None)
    if "datasets" in sys.modules:
        import datasets

        enabled = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        undo.append(lambda: datasets.enable_progress_bars() if enabled else None)

    def restore() -> None:
        # a command called in-process (tests, notebooks) leaves the libraries as it found them
        for action in undo:
            action()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    return restore


def close_progress_bars() -> None:
    """Close the progress bars an interrupted run left open, so that they are not redrawn below its last line."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


if __name__ == "__main__":
    sys.exit(main())
