"""`plldr-hf plot-agf MODEL_DIR`: draw the learned AGF coefficient curves c_h(δ) per layer and head into a PNG."""

from plldr_hf_cli.arguments import bounded_int
from plldr_hf_cli.output import write_file


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot-agf",
        help="plot the learned AGF coefficient curves of a translation model",
        description=(
            "Load a saved translation model (model_type agf, position_encoding agf) and write a PNG with one panel "
            "per AGF module (encoder self-, decoder self- and cross-attention per layer, PCM-V coefficients when "
            "separate) and one line per head: c_h(δ) = Base·(1 + |δ|/r)^(−k)·A(δ) over the signed distance δ."
        ),
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="saved model folder (config.json + weights)")
    parser.add_argument("-o", "--output", metavar="PNG", help="output file (default: MODEL_DIR/agf_coefficients.png)")
    # the bound is the model's MAX_CURVE_DISTANCE (not imported here: the parsers load without torch)
    parser.add_argument(
        "--max-distance", type=bounded_int(1, 100_000), default=64, help="largest |δ| drawn (default: %(default)s)"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    import sys
    from pathlib import Path

    from plldr_hf.loading import load_model
    from plldr_hf.models.agf.plots import plot_coefficient_curves

    if args.max_distance < 1:
        print("plldr-hf plot-agf: error: --max-distance must be at least 1", file=sys.stderr)
        return 2
    try:
        model = load_model(args.model_dir, model_type="agf")
        output = Path(args.output) if args.output else Path(args.model_dir) / "agf_coefficients.png"
        if not output.suffix:
            output = output.with_suffix(".png")  # as matplotlib names a file without a format suffix
        path = write_file(
            output, lambda target: plot_coefficient_curves(model, target, max_distance=args.max_distance)
        )
    except (OSError, ValueError) as error:
        print(f"plldr-hf plot-agf: error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0
