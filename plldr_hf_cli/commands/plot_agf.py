"""`plldr-hf plot-agf MODEL_DIR`: draw the learned AGF coefficient curves c_h(δ) per layer and head into a PNG."""


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
    parser.add_argument("--max-distance", type=int, default=64, help="largest |δ| drawn (default: %(default)s)")
    parser.set_defaults(func=run)


def run(args) -> int:
    import sys

    from plldr_hf.plots import plot_agf

    if args.max_distance < 1:
        print("plldr-hf plot-agf: error: --max-distance must be at least 1", file=sys.stderr)
        return 2
    try:
        path = plot_agf(args.model_dir, args.output, max_distance=args.max_distance)
    except (OSError, ValueError) as error:
        print(f"plldr-hf plot-agf: error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0
