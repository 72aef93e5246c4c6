"""`plldr-hf diagnose MODEL_DIR`: order parameters and collapse checks of a PLDR-LLM (`plldr_hf.models.pldrllm.diagnostics`)."""

from plldr_hf_cli.arguments import non_negative_float, positive_int
from plldr_hf_cli.output import add_overwrite_flag, check_output, write_staged


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="order parameters, rank-one / commutant / Perron-Frobenius / DAG checks of a PLDR-LLM",
        description=(
            "Measure how input-dependent a PLDR-LLM's deductive outputs (A, A_LM, A_P, G_LM) are and whether the "
            "model is collapsed: order parameters (SOC and audit definitions), the rank-one audit of A, the "
            "cross-head spread, the RoPE-commutant residual of G, the Perron-Frobenius check of A_LM and the DAG "
            "values. Prints Markdown tables and writes diagnostics.json, order_parameter.png and "
            "singular_values_A.png."
        ),
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="saved PLDR-LLM folder (config.json + weights)")
    parser.add_argument(
        "--texts", metavar="FILE", help="prompts, one per line (default: [eos] plus seeded random token sequences)"
    )
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer folder for --texts (default: MODEL_DIR)")
    parser.add_argument(
        "--output-dir", metavar="DIR", help="where the JSON and PNG files go (default: MODEL_DIR/diagnostics)"
    )
    parser.add_argument(
        "--new-tokens",
        type=positive_int,
        default=16,
        help="greedy continuation length for the SOC order parameter (default: %(default)s)",
    )
    parser.add_argument(
        "--max-texts",
        type=positive_int,
        default=8,
        help="use at most this many lines of --texts (default: %(default)s)",
    )
    parser.add_argument(
        "--rtol",
        type=non_negative_float,
        default=1e-5,
        help="relative tolerance for 'rows of A identical' (default: %(default)s)",
    )
    add_overwrite_flag(parser, "--output-dir")
    parser.set_defaults(func=run)


def run(args) -> int:
    import sys
    from pathlib import Path

    import torch

    from plldr_hf.loading import load_model, load_tokenizer, read_texts
    from plldr_hf.models.pldrllm.diagnostics import diagnose
    from plldr_hf.models.pldrllm.plots import save_diagnostics

    output_dir = Path(args.output_dir) if args.output_dir else Path(args.model_dir) / "diagnostics"
    refused = check_output("diagnose", output_dir, overwrite=args.overwrite)
    if refused:
        return refused
    try:
        model = load_model(args.model_dir, model_type="pldrllm", dtype=torch.float32)
        inputs = tokenizer = None
        if args.texts:
            inputs = read_texts(args.texts)[: args.max_texts]
            tokenizer = load_tokenizer(args.tokenizer or args.model_dir, model_config=model.config)
        report = diagnose(model, inputs, tokenizer=tokenizer, new_tokens=args.new_tokens, rtol=args.rtol)
    except (FileNotFoundError, ValueError) as error:
        print(f"plldr-hf diagnose: error: {error}", file=sys.stderr)
        return 2
    print(report.format_table())
    written = []
    status = write_staged(
        "diagnose",
        output_dir,
        lambda staging: written.extend(Path(p).name for p in save_diagnostics(report, staging).values()),
        overwrite=args.overwrite,
    )
    if status:
        return status
    print()
    for name in written:
        print(f"wrote {output_dir / name}")
    return 0
