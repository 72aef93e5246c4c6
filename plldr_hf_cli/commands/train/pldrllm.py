"""`plldr-hf train pldrllm`: train a PLDR-LLM causal LM with Trainer (`plldr_hf.training.causal_lm`)."""

import argparse

from plldr_hf_cli.arguments import (
    fail,
    missing_dataset_files,
    non_negative_int,
    positive_float,
    positive_int,
    run_creating,
)


# the model sizes of plldr_hf.training.causal_lm.SIZES (checked by tests/test_cli.py)
SIZES = ("110m", "mini", "small", "tiny")


def register(families) -> None:
    parser = families.add_parser(
        "pldrllm",
        help="PLDR-LLM causal language model (Power Law Graph Attention)",
        description=(
            "Train a PLDR-LLM from scratch on the embedded Shakespeare corpus, local text files or a Hugging Face "
            "dataset, with the reference recipe (AdamW 0.9/0.95, eps 1e-5, weight decay 0.1, clipping 1.0, warm-up "
            "then cosine to 10%) and the optional DAG regulariser. Writes checkpoints, the final model and "
            "tokenizer, loss_curves.png and train_report.json (validation perplexity, order parameter) to "
            "--output-dir. Runs unchanged under `torchrun` and `accelerate launch`."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    missing = missing_dataset_files(args.dataset)
    if missing:
        return fail("train pldrllm", f"--dataset: {missing[0]} does not exist; give existing files or folders")
    from plldr_hf.training.causal_lm import run_from_args

    return run_creating("train pldrllm", args.output_dir, lambda: run_from_args(args))


def _parse_weights(text: str) -> tuple[float, float, float]:
    parts = [p for p in text.replace(" ", "").split(",") if p]
    try:
        weights = tuple(float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--dag-weights expects three numbers a,p,g (A_LM, A_P, G_LM), got {text!r}"
        ) from None
    if len(weights) == 1:
        weights = weights * 3
    if len(weights) != 3 or any(not w >= 0 for w in weights):
        raise argparse.ArgumentTypeError(f"--dag-weights expects three non-negative numbers a,p,g, got {text!r}")
    return weights


def add_arguments(parser) -> None:
    """Adds the `train pldrllm` flags to an argparse parser."""
    parser.add_argument("--size", choices=SIZES, default=None, help="model size (default: tiny)")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="CPU smoke run in seconds: tiny model, 2000 documents, 512-piece tokenizer, 30 steps (flags still win)",
    )
    parser.add_argument("--output-dir", default="pldrllm-run", help="checkpoints, final model and report")
    parser.add_argument(
        "--dataset",
        nargs="+",
        default=[],
        help="local text/JSON/Parquet/CSV files or folders, or a Hugging Face dataset name "
        "(default: the embedded Shakespeare corpus)",
    )
    parser.add_argument("--dataset-config", default=None, help="configuration of a Hugging Face dataset")
    parser.add_argument("--text-column", default="text", help="text column of table files / Hub datasets")
    parser.add_argument(
        "--max-train-documents", type=positive_int, default=None, help="use only the first N documents"
    )
    parser.add_argument(
        "--tokenizer", default=None, help="existing tokenizer (path or Hub name) instead of training one"
    )
    parser.add_argument(
        "--vocab-size", type=positive_int, default=None, help="tokenizer vocabulary (default: by size)"
    )
    parser.add_argument(
        "--block-size", type=positive_int, default=None, help="tokens per training block (default: by size)"
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=None, help="blocks per device and step (default: by size)"
    )
    parser.add_argument("--gradient-accumulation-steps", type=positive_int, default=1, help="default: 1")
    parser.add_argument("--max-steps", type=positive_int, default=None, help="optimizer steps (default: 100)")
    parser.add_argument(
        "--learning-rate", type=positive_float, default=None, help="peak learning rate (default: 1e-3)"
    )
    parser.add_argument(
        "--warmup-steps", type=non_negative_int, default=None, help="default: 10%% of the steps, at most 2000"
    )
    parser.add_argument("--clip-by", choices=("value", "norm"), default="value", help="gradient clipping at 1.0")
    parser.add_argument(
        "--bf16", action=argparse.BooleanOptionalAction, default=None, help="default: if the GPU supports it"
    )
    parser.add_argument(
        "--dag-weights",
        type=_parse_weights,
        default=(0.0, 0.0, 0.0),
        metavar="A,P,G",
        help="DAG regulariser weights on A_LM, A_P, G_LM (one number: all three; default 0 = off)",
    )
    parser.add_argument("--dag-warmup-steps", type=non_negative_int, default=0, help="linear ramp of the DAG weights")
    parser.add_argument("--dag-form", choices=("log_ratio", "notears"), default="log_ratio")
    parser.add_argument("--log-dag", action="store_true", help="log the DAG values even when their weights are 0")
    parser.add_argument("--logging-steps", type=positive_int, default=None, help="default: 10")
    parser.add_argument(
        "--eval-steps", type=non_negative_int, default=None, help="default: every 20%% of the run; 0: only at the end"
    )
    parser.add_argument(
        "--save-steps", type=positive_int, default=None, help="checkpoint interval (default: at the end)"
    )
    parser.add_argument("--save-total-limit", type=positive_int, default=2)
    parser.add_argument("--max-eval-blocks", type=positive_int, default=None, help="cap on validation blocks")
    parser.add_argument("--report-to", nargs="+", default=["tensorboard"], help="Trainer integrations, or none")
    parser.add_argument(
        "--resume",
        nargs="?",
        const="last",
        default=None,
        metavar="CHECKPOINT",
        help="continue from the last checkpoint in --output-dir, or from CHECKPOINT",
    )
    parser.add_argument(
        "--padding-free",
        action="store_true",
        help="one document per example, batches concatenated without padding (DataCollatorWithFlattening); "
        "each document keeps its own Gram matrix and attention (default: fixed packed blocks)",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0)
