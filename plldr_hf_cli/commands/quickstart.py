"""`plldr-hf quickstart`: the main job on the embedded data (see `plldr_hf_cli/quickstart.py`)."""

from plldr_hf_cli.arguments import load_light_module, positive_float
from plldr_hf_cli.output import add_overwrite_flag, run_in_folder


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "quickstart",
        help="train and evaluate both model families on the embedded data (about 10 minutes on a CPU)",
        description=(
            "Train a small PLDR-LLM on the embedded Shakespeare text (DAG regulariser, order parameter, collapse, "
            "samples, collapse speed-up) and a small translator (model_type agf) on the embedded en-de pairs (BLEU, chrF, "
            "accuracy); write models, summary.md, metrics.json and plots to the output directory."
        ),
    )
    parser.add_argument("--output-dir", default="runs/quickstart", help="where everything is written")
    parser.add_argument(
        "--minutes",
        type=positive_float,
        default=10.0,
        help="time budget; under 4 minutes runs tiny models (smoke test)",
    )
    parser.add_argument(
        "--translator",
        choices=tuple(load_light_module("plldr_hf.models.agf.position_encodings").POSITION_VARIANTS),
        help="position handling of the translator [sinusoidal: the one that learns to translate in 10 CPU minutes]",
    )
    add_overwrite_flag(parser, "--output-dir")
    parser.set_defaults(func=run)


def run(args) -> int:
    from plldr_hf_cli.quickstart import run_quickstart

    def work() -> int:
        run_quickstart(args.output_dir, minutes=args.minutes, translator=args.translator)
        return 0

    return run_in_folder("quickstart", args.output_dir, work, overwrite=args.overwrite)
