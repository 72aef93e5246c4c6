"""`plldr-hf train pldrllm`: train a PLDR-LLM causal LM with Trainer (`plldr_hf.training.causal_lm`).

The flags are generated from `plldr_hf.training.options.TrainOptions` (one per field, with the help and checks in the
field's metadata; `plldr_hf_cli.arguments.add_option_flags`, shared with `train agf`), so an option and its default
are written once. That module imports only the standard library and is loaded here without importing `plldr_hf`
(which imports torch): `--help` and usage errors stay fast.
"""

import argparse
from pathlib import Path

from plldr_hf_cli.arguments import (
    add_option_flags,
    fail,
    load_light_module,
    options_from_args,
    refuse_run_paths,
    show_pipeline_logs,
)
from plldr_hf_cli.output import add_overwrite_flag, run_in_folder


def load_options_module():
    """`plldr_hf.training.options`, without importing torch (`plldr_hf_cli.arguments.load_light_module`)."""
    return load_light_module("plldr_hf.training.options")


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


def add_arguments(parser) -> None:
    """Adds the `train pldrllm` flags (one per `TrainOptions` field) and `--tiny` to an argparse parser."""
    options = load_options_module()
    tiny = ", ".join(f"{key} {value}" for key, value in options.PRESETS["pldrllm"]["tiny"]["run"].items())
    parser.add_argument(
        "--tiny", action="store_true", help=f"CPU smoke run in seconds: the tiny preset ({tiny}); flags still win"
    )
    add_option_flags(parser, options.TrainOptions)
    add_overwrite_flag(parser, "--output-dir")


def options_from(args: argparse.Namespace):
    """`TrainOptions` from parsed flags: the field defaults or the `tiny` preset, then every flag given."""
    options = load_options_module()
    return options_from_args(args, options.TrainOptions, "tiny" if getattr(args, "tiny", False) else None)


def _sig(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def train_and_report(options) -> int:
    """Train a run's `TrainOptions` and print the headline numbers."""
    from plldr_hf.models import FAMILIES

    # the family's training entry point: plldr_hf.training.causal_lm.train_causal_lm
    train_causal_lm = FAMILIES["pldrllm"].entry_point("train")

    # the pipeline's own progress lines; other libraries (accelerate, datasets) stay at WARNING
    show_pipeline_logs()
    report = train_causal_lm(options)
    if report:
        before = ((report.get("order_parameter_before") or {}).get("across_inputs_max_over_layers") or {}).get("G_LM")
        after = ((report.get("order_parameter_after") or {}).get("across_inputs_max_over_layers") or {}).get("G_LM")
        print(f"validation perplexity: {report['validation_perplexity']:.3g}")
        if before is not None or after is not None:
            print(
                "G_LM order parameter (SOC RMSE/|mean| across the calibration inputs, max over layers; the collapse "
                "criterion): "
                f"before {_sig(before)}, after {_sig(after)}"
            )
        print(f"{_sig(report.get('s_per_step'))} s/step (train_runtime / steps)")
        print(
            f"report: {Path(options.output_dir, 'train_report.json')}; curves: {report['loss_curves'] or 'not plotted (too few logged steps)'}"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        options = options_from(args)
    except ValueError as error:
        return fail("train pldrllm", error)
    refused = refuse_run_paths("train pldrllm", options)
    if refused:
        return refused
    return run_in_folder(
        "train pldrllm",
        options.output_dir,
        lambda: train_and_report(options),
        overwrite=args.overwrite,
        resume=bool(options.resume),
    )
