"""`plldr-hf quickstart`: the main job on the embedded data (see `plldr_hf_cli/quickstart.py`)."""

from plldr_hf_cli.arguments import load_light_module, positive_float, positive_int
from plldr_hf_cli.output import add_overwrite_flag, run_in_folder


# the main job's wall time on an idle 2-core CPU, the one number the README, docs/quickstart.md and this help quote
# (measured: 6.7 minutes, docs/quickstart.md; tests/test_readme.py checks that they agree)
QUICKSTART_MINUTES = 7


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "quickstart",
        help=f"train and evaluate both model families on the embedded data (about {QUICKSTART_MINUTES} minutes on an "
        "idle 2-core CPU)",
        description=(
            "Train a small PLDR-LLM on the embedded Shakespeare text (DAG regulariser, order parameter, collapse, "
            "samples, collapse speed-up) and a small translator (model_type agf) on the embedded en-de pairs (BLEU, "
            "chrF, accuracy); write models, summary.md, metrics.json and plots to the output directory. Both stages "
            "run a fixed number of steps on a fixed number of threads, so the scores are the same on any machine."
        ),
    )
    parser.add_argument("--output-dir", default="runs/quickstart", help="where everything is written")
    parser.add_argument("--tiny", action="store_true", help="tiny models and a few dozen steps (a smoke test)")
    parser.add_argument(
        "--minutes",
        type=positive_float,
        help="a time budget instead of the fixed plan: stages stop early when it runs out, and the summary then "
        "warns that the scores are not the quickstart's results",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=2, help="CPU threads; the scores depend on it (default: %(default)s)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--translator",
        choices=tuple(load_light_module("plldr_hf.models.agf.position_encodings").POSITION_VARIANTS),
        help="position handling of the translator [agf+pcmv+abs: the AGF paper's AGF + PCM-V with absolute sinusoids, which uses its source at this budget]",
    )
    add_overwrite_flag(parser, "--output-dir")
    parser.set_defaults(func=run)


def run(args) -> int:
    from plldr_hf_cli.quickstart import QuickstartPlan, run_quickstart

    plan = QuickstartPlan.named(
        "tiny" if args.tiny else "default", minutes=args.minutes, threads=args.threads, progress=not args.no_progress
    )

    def work() -> int:
        run_quickstart(args.output_dir, plan, translator=args.translator)
        return 0

    return run_in_folder("quickstart", args.output_dir, work, overwrite=args.overwrite)
