"""`plldr-hf train pldrllm`: train a PLDR-LLM causal LM with Trainer (`plldr_hf.training.causal_lm`)."""

import argparse


def register(families) -> None:
    from plldr_hf.training.causal_lm import add_arguments

    parser = families.add_parser(
        "pldrllm",
        help="PLDR-LLM causal language model (Power Law Graph Attention)",
        description=(
            "Train a PLDR-LLM from scratch on the embedded Shakespeare corpus, local text files or a Hugging Face "
            "dataset, with the reference recipe (AdamW 0.9/0.95, eps 1e-5, weight decay 0.1, clipping 1.0, warm-up "
            "then cosine to 10%%) and the optional DAG regulariser. Writes checkpoints, the final model and "
            "tokenizer, loss_curves.png and train_report.json (validation perplexity, order parameter) to "
            "--output-dir. Runs unchanged under `torchrun` and `accelerate launch`."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from plldr_hf.training.causal_lm import run_from_args

    return run_from_args(args)
