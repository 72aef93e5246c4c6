"""`plldr-hf train FAMILY ...`: one command path for every model family.

Every module in `plldr_hf_cli/commands/train/` describes one family's command line: `register(family_subparsers)`
adds its parser (the flags generated from its options dataclass) and returns it, `options_from(args)` turns parsed
flags into its options, and `summary(report)` gives the lines printed after the run. The run itself is the same for
all (`run` below): resolve the options once, refuse bad paths, then `plldr_hf.training.run.train(options)` in the
output folder, and print the family's summary of the `RunReport`. Adding a family therefore means adding a module
here, without touching this file or another family's.
"""

import argparse
import importlib
import pkgutil
from functools import partial

from plldr_hf_cli.arguments import fail, refuse_run_paths, show_pipeline_logs
from plldr_hf_cli.output import interrupts_deferred, run_in_folder


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model (one subcommand per model family)",
        description="Train a model. Choose the model family; `plldr-hf train FAMILY --help` lists its options.",
    )
    families = parser.add_subparsers(dest="family", metavar="FAMILY", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        family = importlib.import_module(f"{__name__}.{info.name}")
        options_class = family.options_class()
        sub = family.register(families)
        sub.set_defaults(func=partial(run, family), options_class=options_class)
        sub.epilog = (
            f"Every field of transformers' {options_class.TRAINER_ARGUMENTS} is also a flag of its own name "
            "(--save_only_model, --push_to_hub, --lr_scheduler_type linear), read by transformers' HfArgumentParser."
        )


def run(family, args: argparse.Namespace) -> int:
    """`plldr-hf train FAMILY`: the family's options, resolved once, trained in `--output-dir`."""
    command = f"train {args.family}"
    try:
        options = family.options_from(args).resolved()
    except ValueError as error:
        return fail(command, error)
    refused = refuse_run_paths(command, options)
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
        overwrite=args.overwrite,
        resume=bool(options.resume),
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
