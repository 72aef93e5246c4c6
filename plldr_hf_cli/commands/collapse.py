"""`plldr-hf collapse MODEL_DIR OUT_DIR`: freeze a PLDR-LLM's G (`PldrllmForCausalLM.collapse()`) and save it."""

from plldr_hf_cli.arguments import non_negative_float
from plldr_hf_cli.output import add_overwrite_flag, check_output, write_staged


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "collapse",
        help="freeze G of an input-invariant PLDR-LLM and save the collapsed model",
        description=(
            "Measure whether G_LM is input-invariant on calibration inputs (SOC order parameter of "
            "arXiv 2603.23539), refuse with the numbers when it is not (unless --force), then freeze one G per layer and head "
            "and save the collapsed model: attention runs as SDPA with q' = q_rot·G, without the metric learner. "
            "With --drop-metric-learner the model is saved in the released fixed-G format "
            "(custom_G_type='external'), which is smaller but cannot be uncollapsed or trained further."
        ),
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="saved PLDR-LLM folder (config.json + weights)")
    parser.add_argument("output_dir", metavar="OUT_DIR", help="where the collapsed model is saved")
    parser.add_argument(
        "--tolerance",
        type=non_negative_float,
        default=1e-3,
        help="largest accepted SOC order parameter of G_LM across inputs (default: %(default)s)",
    )
    parser.add_argument("--force", action="store_true", help="collapse even when G is not input-invariant")
    parser.add_argument(
        "--drop-metric-learner",
        action="store_true",
        help="save in the released fixed-G format (custom_G_type='external'), without metric learner/PLGA tensors",
    )
    parser.add_argument(
        "--texts", metavar="FILE", help="calibration prompts, one per line (default: [eos] plus random sequences)"
    )
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer folder for --texts (default: MODEL_DIR)")
    add_overwrite_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    import json
    import sys
    from pathlib import Path

    from plldr_hf.loading import load_model, load_tokenizer, read_texts

    output_dir = Path(args.output_dir)
    if output_dir.resolve() == Path(args.model_dir).resolve():
        print("plldr-hf collapse: error: OUT_DIR must differ from MODEL_DIR", file=sys.stderr)
        return 2
    refused = check_output("collapse", output_dir, overwrite=args.overwrite)
    if refused:
        return refused
    try:
        # keep the checkpoint's dtype: the PLGA maths runs in float32 whatever the weights are
        model = load_model(args.model_dir, model_type="pldrllm")
        calibration = tokenizer = None
        if args.texts:
            calibration = read_texts(args.texts)
            tokenizer = load_tokenizer(args.tokenizer or args.model_dir, model_config=model.config)
        report = model.collapse(calibration, tolerance=args.tolerance, force=args.force, tokenizer=tokenizer)
    except (FileNotFoundError, ValueError) as error:
        message = str(error).replace("Pass force=True to collapse anyway", "Rerun with --force to collapse anyway")
        print(f"plldr-hf collapse: error: {message}", file=sys.stderr)
        return 1 if message.startswith("collapse() refused") else 2
    print(report)
    if args.drop_metric_learner:
        model = model.to_fixed_g()
    if tokenizer is None:
        try:
            tokenizer = load_tokenizer(args.tokenizer or args.model_dir, model_config=model.config)
        except ValueError:
            tokenizer = None

    def save(staging: Path) -> None:
        model.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        (staging / "collapse_report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")

    status = write_staged("collapse", output_dir, save, overwrite=args.overwrite)
    if status:
        return status
    form = "fixed-G (custom_G_type='external')" if args.drop_metric_learner else "collapsed"
    print(f"\nsaved the {form} model to {output_dir}")
    return 0
